"""`dbt retry` of a named run, from any runner.

The retry state is the last message on the (project, principal) retry subject,
so a runner that never saw the run restores its run_results.json from the object
store; `dbt retry` re-parses the project itself, so the manifest is not stored.
A retry names the run it resumes and is refused for any other, naming both.
"""

from __future__ import annotations

import asyncio

import msgspec

from services.runner.context import RunnerContext
from services.runner.execution import Execution, finish, profile_digest, refuse
from services.runner.job_setup import Refused, prepare
from shared import events as ev
from shared import subjects
from shared.commands import BuildCommand, RetryCommand, RunCommand

__all__ = ["retry"]


async def retry(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt: int,
    cancelled: asyncio.Event,
) -> ev.Event:
    command: RetryCommand = body.command
    saved = await ctx.bus.last_event(subjects.retry_event(project, body.requested_by, "saved"))
    who = body.requested_by or "anonymous"
    if not isinstance(saved, ev.RetryStateSaved):
        return await refuse(
            ctx,
            project,
            run_id,
            f"nothing is saved to retry for project {project!r} and principal"
            f" {who!r}: a retry resumes that principal's latest build run, and"
            " none has finished (hidden runs save nothing)",
        )
    if saved.run_id != command.dbt_retry_job:
        return await refuse(
            ctx,
            project,
            run_id,
            f"run {command.dbt_retry_job!r} is not the run a retry would resume:"
            f" the retry state of project {project!r} for {who!r} holds run"
            f" {saved.run_id!r} (only the latest run per project and principal"
            " is kept)",
        )
    resumed = msgspec.convert(saved.command, BuildCommand)
    try:
        prepared = await prepare(
            ctx,
            saved.version,
            f"{run_id}.{attempt}",
            packages_digest=saved.packages_digest,
            cmd=resumed,
            args=saved.args,
        )
    except Refused as exc:
        return await refuse(ctx, project, run_id, str(exc))
    try:
        if profile_digest(prepared) != saved.profile_digest:
            return await refuse(
                ctx,
                project,
                run_id,
                f"the warehouse profile changed since run {saved.run_id!r}"
                " (repointed, or a credential rotated); a retry would resume"
                " against another connection: start a new build instead",
            )
        target = prepared.job.project / "target"
        target.mkdir(exist_ok=True)
        (target / "run_results.json").write_bytes(await ctx.bus.get_blob(saved.run_results_digest))
        execution = await Execution.start(
            ctx, prepared, project, run_id, attempt, cancelled, version=saved.version
        )
        try:
            # --state is dbt retry's own: it reads the resumed run_results from there.
            code, error = await execution.invoke("retry", ["--state", "target"]), None
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise
            code, error = -1, "cancelled"
        submitted = {**saved.command, **({"args": saved.args} if saved.args else {})}
        return await finish(
            execution,
            body,
            code,
            error,
            command="retry",
            submitted=submitted,
            version=saved.version,
            packages_digest=saved.packages_digest,
        )
    finally:
        prepared.job.cleanup()

"""`dbt retry` of a named run, from any runner.

The retry state is the last message on the (project, principal) retry subject,
so a runner that never saw the run restores its run_results.json from the object
store; `dbt retry` re-parses the project itself, so the manifest is not stored.
A retry names the run it resumes and is refused for any other, naming both. It resumes
the version that run built (the run's identity: version, packages, profile) in that run's
environment; when the environment holds another version now it is refused, naming both,
unless the command asks for the old one.
"""

from __future__ import annotations

import asyncio

import msgspec
from jetdbt.services.runner.attempts.attempt import Attempt, Source, refuse
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.process.dbt_process import DbtInvocation
from jetdbt.services.runner.setup.placement import Placement
from jetdbt.shared.blobs.digests import short_digest
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import AnyDbtCommand, RetryCommand, RunCommand
from jetdbt.shared.project import slot_versions

__all__ = ["retry"]

# dbt retry reads the resumed run_results.json from --state and writes its own to its
# target: the same folder, relative to the project, as a retry in a terminal would use.
RESUMED = "target"


async def retry(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt_number: int,
    cancelled: asyncio.Event,
    where: Placement,
) -> ev.Event:
    """Resume the run the command names; publish RunFinished, or RunRefused naming why not."""
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
    newer = await _newer_version(ctx, project, saved, command, where)
    if newer:
        return await refuse(ctx, project, run_id, newer)
    resumed = msgspec.convert(saved.command, AnyDbtCommand)
    source = Source(
        saved.version, saved.packages_digest, resumed, saved.args, resumes=saved, where=where
    )
    return await _Retry(ctx, project, body, run_id, attempt_number, cancelled, source).run()


async def _newer_version(
    ctx: RunnerContext,
    project: str,
    saved: ev.RetryStateSaved,
    command: RetryCommand,
    where: Placement,
) -> str | None:
    """Why the retry is refused because its run's environment holds another version now
    than the one its run built, or None."""
    slot = await slot_versions.slot_for_run(
        ctx.bus, project, where.environment, where.principal, where.pr
    )
    deployed = await slot_versions.held_by(ctx.bus, project, slot)
    if command.old_version or not isinstance(deployed, ev.Deployed):
        return None
    if deployed.version == saved.version:
        return None
    return (
        f"run {saved.run_id!r} built version {short_digest(saved.version)} of project"
        f" {project!r}, which is now at version {short_digest(deployed.version)}: a retry"
        " resumes the version its run built, so it would rebuild the old files. Build the"
        f" deployed version (jetdbt run {project}), or resume the old one on purpose"
        f" (jetdbt retry {saved.run_id} --old-version; old_version: true in the command)"
    )


class _Retry(Attempt):
    resume: DbtInvocation | None = None  # the dbt retry, once its state is restored

    def mode(self) -> str:
        return "retry"

    def submitted(self) -> dict:
        saved = self.source.resumes
        return {**saved.command, **({"args": saved.args} if saved.args else {})}

    async def check(self) -> str | None:
        """Refused when the profile moved; else the saved run_results.json is restored."""
        saved = self.source.resumes
        if self.prepared.profile_digest != saved.profile_digest:
            return (
                f"the warehouse profile changed since run {saved.run_id!r}"
                " (repointed, or a credential rotated); a retry would resume"
                " against another connection: start a new build instead"
            )
        self.resume = self.prepared.dbt("retry", ["--state", RESUMED], target_dir=RESUMED)
        restored = self.resume.artifact_path("run_results.json")
        restored.parent.mkdir(exist_ok=True)
        restored.write_bytes(await self.ctx.bus.get_blob(saved.run_results_digest))
        return None

    async def steps(self) -> int:
        saved = self.source.resumes
        await self.log(f"jetdbt: resuming run {saved.run_id} at version {saved.version}")
        return await self.invoke(self.resume)

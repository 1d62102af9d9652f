"""A parse: `dbt parse` and the graph it yields, with nothing built.

A parse of a bundle nobody deployed stores a graph keyed by its own run alone
(scope "parse"); a parse of the deployed version stores a run snapshot only when
it differs from the version's graph. Neither publishes ownership or state.
"""

from __future__ import annotations

import asyncio

import msgspec

from services.runner import graph
from services.runner.context import RunnerContext
from services.runner.execution import Execution, finish, refuse
from services.runner.job_setup import Refused, prepare
from shared import events as ev
from shared.commands import BuildCommand, ParseCommand, RunCommand

__all__ = ["parse"]


async def parse(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt: int,
    deployed: ev.Deployed | None,
    cancelled: asyncio.Event,
) -> ev.Event:
    command: ParseCommand = body.command
    version = command.bundle_digest or deployed.version
    try:
        prepared = await prepare(
            ctx,
            version,
            f"{run_id}.{attempt}",
            packages_digest=None if command.bundle_digest else deployed.packages_digest,
            cmd=BuildCommand(vars=command.vars),
            args=body.args,
        )
    except Refused as exc:
        return await refuse(ctx, project, run_id, str(exc))
    try:
        execution = await Execution.start(
            ctx, prepared, project, run_id, attempt, cancelled, version=version
        )
        try:
            code, error = await execution.invoke("parse", prepared.plan.common_args()), None
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise
            code, error = -1, "cancelled"
        manifest_path = prepared.job.project / "target" / "manifest.json"
        if code == 0 and manifest_path.exists():
            base = (
                None
                if command.bundle_digest
                else await graph.version_graph_digest(ctx.bus, project, version)
            )
            await graph.publish_graph(
                ctx,
                project,
                "" if command.bundle_digest else version,
                msgspec.json.decode(manifest_path.read_bytes()),
                prepared.plan.warehouse,
                run_id=run_id,
                base_digest=base,
                principal=body.requested_by,
            )
        return await finish(
            execution,
            body,
            code,
            error,
            command="parse",
            submitted=msgspec.to_builtins(command),
            version=version,
            packages_digest=None,
        )
    finally:
        prepared.job.cleanup()

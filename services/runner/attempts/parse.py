"""A parse: `dbt parse` and the graph it yields, with nothing built.

A parse of a bundle nobody deployed stores a graph keyed by its own run alone
(scope "parse"); a parse of the deployed version stores a run snapshot only when
it differs from the version's graph. Neither publishes ownership or state.
"""

from __future__ import annotations

import asyncio

import msgspec
from jetdbt.services.runner import graph
from jetdbt.services.runner.attempts.attempt import Attempt, Source
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.setup.placement import Placement
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, ParseCommand, RunCommand

__all__ = ["parse"]


async def parse(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt_number: int,
    deployed: ev.Deployed | None,
    cancelled: asyncio.Event,
    where: Placement,
) -> ev.Event:
    """Parse a bundle (undeployed) or the deployed version; publish RunFinished or RunRefused."""
    command: ParseCommand = body.command
    if command.bundle_digest:
        version, packages = command.bundle_digest, None
    else:
        version, packages = deployed.version, deployed.packages_digest
    source = Source(version, packages, BuildCommand(vars=command.vars), body.args, where=where)
    return await _Parse(ctx, project, body, run_id, attempt_number, cancelled, source).run()


class _Parse(Attempt):
    writes = False  # a parse builds nothing: it takes no environment lease
    connects = False  # nor does it open a connection: it needs no login of its own

    def mode(self) -> str:
        return "parse"

    def submitted(self) -> dict:
        return msgspec.to_builtins(self.body.command)

    async def steps(self) -> int:
        undeployed = bool(self.body.command.bundle_digest)
        code = await self.invoke(self.prepared.dbt("parse", self.prepared.plan.common_args()))
        manifest = self.artifact("manifest.json")
        if code != 0 or manifest is None:
            return code
        version = self.source.version
        base = None
        if not undeployed:
            base = await graph.version_graph_digest(self.ctx.bus, self.project, version)
        await graph.publish_graph(
            self.ctx,
            self.project,
            "" if undeployed else version,
            manifest,
            self.prepared.plan.warehouse,
            run_id=self.run_id,
            base_digest=base,
            principal=self.body.requested_by,
        )
        return code

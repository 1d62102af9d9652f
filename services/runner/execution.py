"""The dbt invocations of one run attempt, and how the attempt ends.

Node events and log lines are published as dbt reports them. Each invocation's
run_results.json names only what it ran, so results are overlaid: the run's
result lists every node it touched with its last outcome, and the merged
run_results.json is what a later `dbt retry` resumes from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec

from services.runner import results
from services.runner.context import RunnerContext
from services.runner.job_setup import Prepared
from shared import events as ev
from shared import subjects
from shared.commands import RunCommand
from shared.digests import digest_of
from shared.outcomes import totals

__all__ = ["Execution", "finish", "refuse"]

ERROR_TAIL = 20


class Execution:
    def __init__(
        self,
        ctx: RunnerContext,
        prepared: Prepared,
        project: str,
        run_id: str,
        attempt: int,
        cancelled: asyncio.Event,
    ):
        self.ctx, self.prepared, self.project = ctx, prepared, project
        self.run_id, self.attempt, self.cancelled = run_id, attempt, cancelled
        self.nodes: dict[str, ev.NodeResult] = {}
        self.merged: dict | None = None
        self.round = 0
        self.lines: list[str] = []
        self.log_subject = subjects.run_log(run_id)

    @classmethod
    async def start(
        cls,
        ctx: RunnerContext,
        prepared: Prepared,
        project: str,
        run_id: str,
        attempt: int,
        cancelled: asyncio.Event,
        *,
        version: str,
    ) -> Execution:
        """Say the attempt started (on which runner, with which version), then run it."""
        await ctx.bus.publish(
            ev.RunStarted(
                project=project, run_id=run_id, attempt=attempt, version=version, runner=ctx.name
            )
        )
        return cls(ctx, prepared, project, run_id, attempt, cancelled)

    async def log(self, line: str) -> None:
        """A line in the run's human-readable log (masked: a secret may be in any line)."""
        line = self.prepared.resolver.mask(line)
        self.lines.append(line)
        await self.ctx.bus.nc.publish(self.log_subject, line.encode())

    async def _on_event(self, record: dict) -> None:
        start = results.node_start(record)
        if start is not None:
            await self.ctx.bus.publish(
                ev.NodeStarted(
                    project=self.project,
                    run_id=self.run_id,
                    attempt=self.attempt,
                    unique_id=start.unique_id,
                    resource_type=start.resource_type,
                    name=start.name,
                    relation=start.relation,
                    started_at=start.started_at,
                    round=self.round,
                )
            )
            return
        node = results.node_finished(record, self.round)
        if node is not None:
            await self.ctx.bus.publish(
                ev.NodeFinished(
                    project=self.project,
                    run_id=self.run_id,
                    attempt=self.attempt,
                    node=node,
                )
            )

    async def invoke(self, command: str, args: list[str]) -> int:
        """One dbt invocation; raises CancelledError when the run is cancelled meanwhile."""
        p = self.prepared
        inv = p.dbt(command, args)
        run = asyncio.create_task(
            inv.run(self.log, self._on_event, self.ctx.settings.run_timeout_seconds)
        )
        stop = asyncio.create_task(self.cancelled.wait())
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            raise asyncio.CancelledError("cancelled")
        code = run.result()
        self._collect()
        return code

    def _collect(self) -> None:
        target = self.prepared.job.project / "target"
        run_results = results.read_json(target / "run_results.json")
        if run_results is None:
            return
        manifest = results.read_json(target / "manifest.json")
        for node in results.from_artifacts(run_results, manifest, self.round):
            self.nodes[node.unique_id] = node
        if self.merged is None:
            self.merged = run_results
        else:
            redone = {r.get("unique_id"): r for r in run_results.get("results", [])}
            kept = [r for r in self.merged["results"] if r.get("unique_id") not in redone]
            self.merged["results"] = kept + list(redone.values())
        (target / "run_results.json").unlink()


async def refuse(ctx: RunnerContext, project: str, run_id: str, reason: str) -> ev.RunRefused:
    refused = ev.RunRefused(project=project, run_id=run_id, reason=reason)
    await ctx.bus.publish(refused)
    return refused


def profile_digest(prepared: Prepared) -> str:
    """Moves when the connection moves (or a password rotates); never reveals it."""
    return digest_of(prepared.plan.profiles_text.encode())


async def finish(
    execution: Execution,
    body: RunCommand,
    code: int,
    error: str | None,
    *,
    command: str,
    submitted: dict,
    version: str,
    packages_digest: str | None,
    deferred_to: str | None = None,
    before_finished: Callable[[ev.RunResult], Awaitable[None]] | None = None,
) -> ev.RunFinished:
    """Build the result, save retry state (unless hidden), publish RunFinished last, so a
    caller that sees the run finish also sees what it published (`before_finished`)."""
    ctx, prepared = execution.ctx, execution.prepared
    plan = prepared.plan
    nodes = sorted(
        execution.nodes.values(), key=lambda n: (n.started_at is None, n.started_at, n.unique_id)
    )
    failed = any(n.outcome == "failed" for n in nodes)
    if error == "cancelled":
        status = "cancelled"
    else:
        status = "passed" if code == 0 and not failed else "failed"
    if status == "failed" and error is None and not failed:
        error = "\n".join(execution.lines[-ERROR_TAIL:])
    result = ev.RunResult(
        status=status,
        engine=plan.engine,
        engine_version=prepared.engine_version,
        command=command,
        totals=totals(n.outcome for n in nodes),
        nodes=nodes,
        exit_code=code,
        invocation_args=submitted,
        warehouse=plan.warehouse,
        target=plan.target,
        error=error,
        deferred_to=deferred_to,
    )
    if execution.merged is not None and not body.hidden:
        digest = await ctx.bus.put_blob(msgspec.json.encode(execution.merged))
        await ctx.bus.publish(
            ev.RetryStateSaved(
                project=execution.project,
                principal=body.requested_by,
                run_id=execution.run_id,
                attempt=execution.attempt,
                run_results_digest=digest,
                version=version,
                packages_digest=packages_digest,
                profile_digest=profile_digest(prepared),
                command={k: v for k, v in submitted.items() if k != "args"},
                args=submitted.get("args", {}),
            )
        )
    if before_finished is not None:
        await before_finished(result)
    finished = ev.RunFinished(
        project=execution.project, run_id=execution.run_id, attempt=execution.attempt, result=result
    )
    await ctx.bus.publish(finished)
    return finished

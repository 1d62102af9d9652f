"""A build run: dbt in a fresh job directory, node events published as they happen.

test_behavior decides the invocations: build = one `dbt build`; after_all =
the build without tests, then, when it succeeded, `dbt test`; none = the build
without tests. "Without tests" is `dbt build --exclude-resource-type test
unit_test` rather than a bare `dbt run`, which would never load seeds or take
snapshots, so a project with seeds could not run under after_all at all. Each
invocation's run_results.json names only what it ran, so results are overlaid
into one run result that lists every node the run touched with its last outcome.
"""

from __future__ import annotations

import asyncio

import msgspec

from services.runner import results, selection
from services.runner.context import RunnerContext
from services.runner.dbt_process import DbtInvocation
from services.runner.plan import selection_methods
from services.runner.setup import Prepared, Refused, prepare
from shared import events as ev
from shared import logging as jlog
from shared import subjects
from shared.commands import RunCommand
from shared.outcomes import totals

__all__ = ["build", "Execution"]

ERROR_TAIL = 20
STATE_METHODS = {"state", "result"}
NO_TESTS = ("--exclude-resource-type", "test", "unit_test")
_SEQUENCES = {
    "build": (("build", ()),),
    "after_all": (("build", NO_TESTS), ("test", ())),
    "none": (("build", NO_TESTS),),
}


class Execution:
    """The dbt invocations of one run attempt, publishing as dbt reports."""

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
        self.round = 0
        self.lines: list[str] = []
        self.log_subject = subjects.run_log(run_id)

    async def _on_line(self, line: str) -> None:
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
        """One dbt invocation; its results overlay what earlier ones reported."""
        p = self.prepared
        inv = DbtInvocation(
            command, args, p.job.project, p.job.profiles, p.env, executable=p.executable
        )
        run = asyncio.create_task(
            inv.run(self._on_line, self._on_event, self.ctx.settings.run_timeout_seconds)
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
        target = p.job.project / "target"
        run_results = results.read_json(target / "run_results.json")
        if run_results is not None:
            manifest = results.read_json(target / "manifest.json")
            for node in results.from_artifacts(run_results, manifest, self.round):
                self.nodes[node.unique_id] = node
            (target / "run_results.json").unlink()
        return code


async def build(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt: int,
    deployed: ev.Deployed,
    cancelled: asyncio.Event,
) -> ev.Event:
    """Run to the end and publish RunFinished, or RunRefused when the run cannot start."""
    log = jlog.get("runner", project=project, run_id=run_id, attempt=attempt)
    try:
        prepared = await prepare(
            ctx,
            deployed.version,
            f"{run_id}.{attempt}",
            packages_digest=deployed.packages_digest,
            cmd=body.command,
            args=body.args,
        )
    except Refused as exc:
        return await _refuse(ctx, project, run_id, str(exc))
    try:
        reason = await _check_selection(prepared, project)
        if reason:
            return await _refuse(ctx, project, run_id, prepared.resolver.mask(reason))
        await ctx.bus.publish(
            ev.RunStarted(
                project=project,
                run_id=run_id,
                attempt=attempt,
                version=deployed.version,
                runner=ctx.name,
            )
        )
        execution = Execution(ctx, prepared, project, run_id, attempt, cancelled)
        code, error = await _run_sequence(execution, prepared)
        result = _result(prepared, body, execution, code, error)
        log.info("run_finished", status=result.status, exit_code=code, nodes=len(result.nodes))
    finally:
        prepared.job.cleanup()
    finished = ev.RunFinished(project=project, run_id=run_id, attempt=attempt, result=result)
    await ctx.bus.publish(finished)
    return finished


async def _refuse(ctx: RunnerContext, project: str, run_id: str, reason: str) -> ev.RunRefused:
    refused = ev.RunRefused(project=project, run_id=run_id, reason=reason)
    await ctx.bus.publish(refused)
    return refused


async def _check_selection(prepared: Prepared, project: str) -> str | None:
    """A selection that resolves to nothing is refused, unless it reads a state (CI with
    nothing changed is an ordinary outcome); a misspelled name is not a success."""
    plan = prepared.plan
    if not plan.has_selection():
        return None
    if selection_methods(plan.select + plan.exclude) & STATE_METHODS:
        return None
    try:
        found = await selection.resolve(prepared.job, plan, prepared.env, prepared.executable)
    except selection.SelectionFailed as exc:
        return f"the selection could not be resolved: {exc}"
    if found:
        return None
    spelled = ", ".join(
        f"{k}={v}"
        for k, v in (
            ("select", plan.select),
            ("exclude", plan.exclude),
            ("selector", plan.selector),
        )
        if v
    )
    return (
        f"the selection ({spelled}) matches no nodes in project {project!r};"
        " check the model names and selector methods (dbt ls --select ...)"
    )


async def _run_sequence(execution: Execution, prepared: Prepared) -> tuple[int, str | None]:
    plan = prepared.plan
    args = [*plan.common_args(), *plan.selection_args()]
    if plan.full_refresh:
        args.append("--full-refresh")
    code = 0
    try:
        for command, extra in _SEQUENCES[plan.test_behavior]:
            command_args = [a for a in args if a != "--full-refresh"] if command == "test" else args
            code = await execution.invoke(command, [*command_args, *extra])
            if code != 0:
                break
    except asyncio.CancelledError:
        return -1, "cancelled"
    except TimeoutError:
        return -1, f"timed out after {execution.ctx.settings.run_timeout_seconds}s"
    return code, None


def _result(
    prepared: Prepared, body: RunCommand, execution: Execution, code: int, error: str | None
) -> ev.RunResult:
    plan = prepared.plan
    nodes = sorted(
        execution.nodes.values(), key=lambda n: (n.started_at is None, n.started_at, n.unique_id)
    )
    status = "cancelled" if error == "cancelled" else ("passed" if code == 0 else "failed")
    if status == "failed" and error is None and not any(n.outcome == "failed" for n in nodes):
        error = "\n".join(execution.lines[-ERROR_TAIL:])
    submitted = msgspec.to_builtins(body.command)
    if body.args:
        submitted = {**submitted, "args": body.args}
    return ev.RunResult(
        status=status,
        engine=plan.engine,
        engine_version=prepared.engine_version,
        command=plan.test_behavior if plan.test_behavior != "build" else "build",
        totals=totals(n.outcome for n in nodes),
        nodes=nodes,
        exit_code=code,
        invocation_args=submitted,
        warehouse=plan.warehouse,
        target=plan.target,
        error=error,
    )

"""A build run: dbt in a fresh job directory, node events published as they happen.

test_behavior decides the invocations: build = one `dbt build`; after_all =
the build without tests, then, when it succeeded, `dbt test`; none = the build
without tests. "Without tests" is `dbt build --exclude-resource-type test
unit_test` rather than a bare `dbt run`, which would never load seeds or take
snapshots, so a project with seeds could not run under after_all at all.
"""

from __future__ import annotations

import asyncio

import msgspec

from services.runner import graph, selection
from services.runner import state as state_mod
from services.runner.context import RunnerContext
from services.runner.execution import Execution, finish, refuse
from services.runner.job_setup import Prepared, Refused, prepare
from services.runner.node_retry_rounds import retry_rounds
from shared import events as ev
from shared import logging as jlog
from shared.commands import RunCommand

__all__ = ["build"]

NO_TESTS = ("--exclude-resource-type", "test", "unit_test")
_SEQUENCES = {
    "build": (("build", ()),),
    "after_all": (("build", NO_TESTS), ("test", ())),
    "none": (("build", NO_TESTS),),
}


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
        return await refuse(ctx, project, run_id, str(exc))
    try:
        reason = await _check_selection(prepared, project)
        if reason:
            return await refuse(ctx, project, run_id, prepared.resolver.mask(reason))
        state = None
        if prepared.plan.defer:
            try:
                state = await state_mod.load(ctx, project, prepared)
            except state_mod.DeferRefused as exc:
                return await refuse(ctx, project, run_id, str(exc))
        execution = await Execution.start(
            ctx, prepared, project, run_id, attempt, cancelled, version=deployed.version
        )
        try:
            await graph.refresh_run_graph(
                ctx,
                prepared,
                project,
                deployed.version,
                run_id,
                body.command,
                principal=body.requested_by,
                on_line=execution.log,
            )
        except graph.GraphRefreshFailed as exc:
            code, error = -1, str(exc)  # fail rather than show a stale graph
        else:
            defer = state_mod.defer_args(prepared.plan) if state else []
            code, error = await _run(execution, defer)
        submitted = msgspec.to_builtins(body.command)
        if body.args:
            submitted["args"] = body.args
        finished = await finish(
            execution,
            body,
            code,
            error,
            command=prepared.plan.test_behavior,
            submitted=submitted,
            version=deployed.version,
            packages_digest=deployed.packages_digest,
            deferred_to=state.run_id if state else None,
            before_finished=lambda result: state_mod.publish(
                execution, result, project, deployed.version
            ),
        )
        log.info("run_finished", status=finished.result.status, exit_code=code)
        return finished
    finally:
        prepared.job.cleanup()


async def _check_selection(prepared: Prepared, project: str) -> str | None:
    """A selection that resolves to nothing is refused, unless it reads a state (CI with
    nothing changed is an ordinary outcome); a misspelled name is not a success."""
    plan = prepared.plan
    if not plan.has_selection():
        return None
    if plan.compares_state():
        return None
    try:
        found = await selection.resolve(prepared)
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


async def _run(execution: Execution, defer: list[str]) -> tuple[int, str | None]:
    """The test_behavior sequence, then node retry rounds when the descriptor asks for them."""
    prepared = execution.prepared
    plan = prepared.plan
    common = plan.common_args() + defer + (["--full-refresh"] if plan.full_refresh else [])
    code = 0
    try:
        for command, extra in _SEQUENCES[plan.test_behavior]:
            base = plan.common_args() + defer if command == "test" else common
            code = await execution.invoke(command, [*base, *plan.selection_args(), *extra])
            if code != 0:
                break
        policy = prepared.descriptor.retry_failed_nodes
        if code != 0 and policy is not None and policy.attempts:
            code = await retry_rounds(execution, policy, common, code)
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():
            raise  # the runner is shutting down: the command is redelivered, not settled
        return -1, "cancelled"
    except TimeoutError:
        return -1, f"timed out after {execution.ctx.settings.run_timeout_seconds}s"
    return code, None

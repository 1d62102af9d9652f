"""A dbt command's run: dbt in a fresh job directory, node events published as they happen.

A build's test_behavior decides its invocations: build = one `dbt build`; after_all =
the build without tests, then, when it succeeded, `dbt test`; none = the build
without tests. "Without tests" is `dbt build --exclude-resource-type test
unit_test` rather than a bare `dbt run`, which would never load seeds or take
snapshots, so a project with seeds could not run under after_all at all.

Every other command (run, test, seed, snapshot, source freshness, run-operation, docs
generate, show) is one invocation of its own dbt command, planned, checked, retried and
reported the same way; only a build publishes the environment's state, and only docs
generate the catalog's column types.
"""

from __future__ import annotations

import asyncio

import msgspec
from jetdbt.services.runner import graph
from jetdbt.services.runner.after import catalog
from jetdbt.services.runner.attempts.attempt import Attempt, Failed, Source
from jetdbt.services.runner.attempts.node_retry_rounds import retry_rounds
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.setup import close_pr, selection
from jetdbt.services.runner.setup import environment_state as state_mod
from jetdbt.services.runner.setup.placement import Placement
from jetdbt.services.runner.setup.plan import command_args
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import ClosePrCommand, OperationCommand, RunCommand
from jetdbt.shared.runs import planned

__all__ = ["build"]

NO_TESTS = ("--exclude-resource-type", "test", "unit_test")
_SEQUENCES = {
    "build": (("build", ()),),
    "after_all": (("build", NO_TESTS), ("test", ())),
    "none": (("build", NO_TESTS),),
}
# The commands whose failed nodes a node retry round rebuilds with the same command.
_RETRIED = {"build", "run", "test", "seed", "snapshot"}


async def build(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt_number: int,
    deployed: ev.Deployed,
    cancelled: asyncio.Event,
    where: Placement,
) -> ev.Event:
    """Run to the end and publish RunFinished, or RunRefused when the run cannot start."""
    source = Source(
        deployed.version,
        deployed.packages_digest,
        body.command,
        body.args,
        environment_lock=deployed.environment_lock,
        where=where,
    )
    return await _Build(ctx, project, body, run_id, attempt_number, cancelled, source).run()


class _Build(Attempt):
    state: ev.StatePublished | None = None  # what a deferring build defers to
    selected: list[str] | None = None  # the unique ids its selection resolved to

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.label = self.body.command.label
        self.resumable = self.label in _RETRIED
        if self.label == "source_freshness":
            self.results_artifact = "sources.json"

    def mode(self) -> str:
        """A build's test behaviour (build, after_all, none), else the command's label."""
        return self.prepared.plan.test_behavior if self.label == "build" else self.label

    def submitted(self) -> dict:
        submitted = msgspec.to_builtins(self.body.command)
        if self.body.args:
            submitted["args"] = self.body.args
        return submitted

    def deferred_to(self) -> str | None:
        return self.state.run_id if self.state else None

    def would_run(self) -> dict[str, planned.Planned]:
        """The nodes of the manifest dbt wrote for the run that its command runs, those its
        selection resolved to; none when that is not known: dbt wrote no manifest yet, or a
        selection that compares states was never resolved."""
        plan = self.prepared.plan
        types = planned.executes(self.label, plan.test_behavior)
        path = self.artifact_path("manifest.json")
        if not types or path is None or (plan.has_selection() and self.selected is None):
            return {}
        try:
            return planned.nodes(path.read_bytes(), types, self.selected)
        except (OSError, msgspec.DecodeError):
            return {}

    async def check(self) -> str | None:
        if isinstance(self.body.command, ClosePrCommand):
            plan, project = self.prepared.plan, self.prepared.job.project
            return close_pr.problem(plan, self.body.pr) or close_pr.write_macro(project)
        if isinstance(self.body.command, OperationCommand):
            return None  # a macro selects no nodes
        reason = await self._check_selection()
        if reason or not self.prepared.plan.defer:
            return reason
        try:
            self.state = await state_mod.load(self.ctx, self.project, self.prepared)
        except state_mod.DeferRefused as exc:
            return str(exc)
        return None

    async def _check_selection(self) -> str | None:
        """A selection that resolves to nothing is refused, unless it reads a state (CI with
        nothing changed is an ordinary outcome); a misspelled name is not a success. What it
        resolves to is kept: the nodes the run would run."""
        plan = self.prepared.plan
        if not plan.has_selection() or plan.compares_state():
            return None
        try:
            self.selected = await selection.resolve(self.prepared)
        except selection.SelectionFailed as exc:
            return f"the selection could not be resolved: {exc}"
        if self.selected:
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
            f"the selection ({spelled}) matches no nodes in project {self.project!r};"
            " check the model names and selector methods (dbt ls --select ...)"
        )

    async def steps(self) -> int:
        """The run's own graph first, then the test_behavior sequence, then node retry
        rounds when the descriptor asks for them."""
        try:
            await graph.refresh_run_graph(
                self.ctx,
                self.prepared,
                self.project,
                self.source.version,
                self.run_id,
                self.body.command,
                principal=self.body.requested_by,
                on_line=self.log,
            )
        except graph.GraphRefreshFailed as exc:
            raise Failed(str(exc)) from None  # fail rather than show a stale graph
        plan = self.prepared.plan
        defer = state_mod.defer_args(plan) if self.state else []
        if self.label != "build":
            return await self._command(defer)
        common = plan.common_args() + defer + (["--full-refresh"] if plan.full_refresh else [])
        code = 0
        for command, extra in _SEQUENCES[plan.test_behavior]:
            base = plan.common_args() + defer if command == "test" else common
            args = [*base, *plan.selection_args(), *extra]
            code = await self.invoke(self.prepared.dbt(command, args))
            if code != 0:
                break
        policy = self.prepared.descriptor.retry_failed_nodes
        if code != 0 and policy is not None and policy.attempts:
            code = await retry_rounds(self, policy, common, code)
        return code

    async def _command(self, defer: list[str]) -> int:
        """One invocation of the run's own dbt command, then node retry rounds of the same
        command when the descriptor asks for them and the command has nodes to rebuild."""
        plan, cmd = self.prepared.plan, self.body.command
        common = plan.common_args()
        words = " ".join(cmd.dbt_words())
        code = await self.invoke(
            self.prepared.dbt(words, [*common, *command_args(plan, cmd, defer)])
        )
        policy = self.prepared.descriptor.retry_failed_nodes
        if code != 0 and self.label in _RETRIED and policy is not None and policy.attempts:
            code = await retry_rounds(self, policy, [*common, *defer], code, words)
        return code

    async def before_finished(self, result: ev.RunResult) -> None:
        if self.label == "docs_generate":
            await catalog.publish(self)  # the graph's column types, before the run's end
        if self.label != "build":
            return  # the environment's state is what a build left, never a part of it
        await state_mod.publish(
            self.ctx.bus,
            self.prepared.plan,
            result,
            project=self.project,
            run_id=self.run_id,
            version=self.source.version,
            manifest=self.artifact_path("manifest.json"),
            run_results=self.results.merged,
            recovered=self.round > 0,
        )

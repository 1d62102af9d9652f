"""Why a job's triggers may not be saved: checked by the runner when the job is saved.

A trigger never loops on itself, so a cycle is refused when the job that closes it is saved,
naming it. A job is woken by the end of a run of the job it runs `after` (same project), and
by a relation in its `on_relation` that another project's dbt writes
(jetdbt.shared.runs.written_relations),
when a job of that project whose command writes runs. So the saved jobs of every project
form one graph of "wakes", and the job being saved may not reach itself through it: a chain
of `after`s that comes back, or job a of project A on a relation project B builds, whose job
b reads a relation A builds. A job on a relation its own project writes is refused apart
(dbt orders its own DAG; a project's own run wakes none of its jobs). A project's writes are
its deployed graph's, whatever a job's selection narrows them to: the check may refuse a
cycle a narrow selection would not close, never miss one. A subscription is held to the rule
every producer is (jetdbt.shared.runs.relations' spelling, under a configured warehouse); a relation
nothing produces yet is accepted, since a subscriber may be deployed before its producer.
A cycle a later deploy closes (a project that starts writing a relation) is not refused
here: the triggers service's depth bound stops it (services/triggers/manager.py). A cycle
through another team's project is refused without naming that team's jobs or projects.
"""

from __future__ import annotations

import msgspec
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.setup.warehouses import UnknownWarehouse, pick
from jetdbt.shared.bus import commands
from jetdbt.shared.identity.principals import project_team
from jetdbt.shared.jobs.triggered_jobs import JobIndex
from jetdbt.shared.runs.relations import parse
from jetdbt.shared.runs.written_relations import command_writes, deployed_graph, project_writes

__all__ = ["trigger_problem"]

Job = tuple[str, str]  # (project, name)


async def trigger_problem(
    ctx: RunnerContext, project: str, name: str, spec: commands.JobSpec
) -> str | None:
    for relation in spec.on_relation:
        try:
            pick(ctx.warehouses, parse(relation).warehouse)
        except UnknownWarehouse as exc:
            return f"on_relation {relation}: {exc}"
    try:
        return await _problem(ctx, project, name, spec)
    except ValueError as exc:  # a project's deployed graph is gone from the object store
        return f"job {name!r}: its triggers cannot be checked for a cycle: {exc}"


async def _problem(ctx: RunnerContext, project: str, name: str, spec: commands.JobSpec):
    writes = _Writes(ctx.bus)
    own = await writes.of(project) if spec.on_relation else {}
    for relation in spec.on_relation:
        if relation in own:
            return (
                f"cycle: job {name!r} would be triggered by {relation}, which {own[relation]} of"
                f" its own project {project!r} builds when the job runs"
            )
    if not spec.on_relation and spec.after is None:
        return None
    index = JobIndex()
    await index.load(ctx.bus)
    jobs = {key: armed.spec for key, armed in index.jobs.items()}
    jobs[(project, name)] = spec
    return await _cycle(jobs, writes, (project, name))


class _Writes:
    """Each project's writes, read from its deployed graph once per check, and its team."""

    def __init__(self, bus):
        self.bus, self.held, self.teams = bus, {}, {}

    async def team(self, project: str) -> str:
        if project not in self.teams:
            self.teams[project] = await project_team(self.bus, project)
        return self.teams[project]

    async def of(self, project: str) -> dict[str, str]:
        if project not in self.held:
            graph = await deployed_graph(self.bus, project)
            self.held[project] = project_writes(graph) if graph is not None else {}
        return self.held[project]


async def _woken_by(jobs: dict[Job, commands.JobSpec], writes: _Writes, job: Job):
    """(the job that wakes `job`, how the link reads, whether it crosses projects) for each
    saved job that does."""
    project, _ = job
    spec = jobs[job]
    if spec.after is not None and (project, spec.after.job) in jobs:
        yield (project, spec.after.job), f" after {spec.after.job}", False
    for other, other_spec in jobs.items():
        if other[0] == project or not command_writes(msgspec.to_builtins(other_spec.command)):
            continue
        built = await writes.of(other[0])
        relation = next((r for r in spec.on_relation if r in built), None)
        if relation is not None:
            how = f" on {relation}, which {built[relation]} of project {other[0]!r} builds"
            yield other, f"{how} in job {other[1]}", True


async def _cycle(jobs: dict[Job, commands.JobSpec], writes: _Writes, start: Job) -> str | None:
    """The cycle through `start`, named link by link, if the saved jobs close one (those
    saved before close none: each was checked when it was saved)."""
    team = await writes.team(start[0])
    seen, stack = {start}, [(start, "", False, False)]
    while stack:
        job, path, crossed, foreign = stack.pop()
        async for waker, how, crosses in _woken_by(jobs, writes, job):
            beyond = foreign or await writes.team(waker[0]) != team
            if waker == start:
                if beyond:
                    return (
                        f"cycle: job {start[1]} of project {start[0]!r} would wake itself"
                        " through the jobs of another team's project"
                    )
                if crossed or crosses:
                    return f"cycle: job {start[1]} of project {start[0]!r}{path}{how}"
                return f"cycle: job {start[1]}{path}{how} in project {start[0]!r}"
            if waker not in seen:
                seen.add(waker)
                stack.append((waker, path + how, crossed or crosses, beyond))
    return None

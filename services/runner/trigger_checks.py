"""Why a job's triggers may not be saved: checked by the runner when the job is saved.

A trigger never loops on itself, so a cycle is refused when it is created, naming it: a
job run `after` a job whose chain of `after`s leads back to it, or a job subscribed to a
relation a model of its own project builds. A subscription is held to the rule every
producer is (shared.relations' spelling, under a configured warehouse); a relation nothing
produces yet is accepted, since a subscriber may be deployed before its producer.
"""

from __future__ import annotations

import contextlib

from services.runner import jobs
from services.runner.context import RunnerContext
from services.runner.warehouses import UnknownWarehouse, pick
from shared import commands, subjects
from shared import events as ev
from shared import graph as graph_mod
from shared.relations import parse

__all__ = ["trigger_problem"]

# Model-like nodes write their relation; a source is read, never written, by the project.
_WRITES = ("model", "seed", "snapshot")
MAX_CHAIN = 64  # a chain of `after`s longer than this is refused as one nobody can follow


async def trigger_problem(
    ctx: RunnerContext, project: str, name: str, spec: commands.JobSpec
) -> str | None:
    for relation in spec.on_relation:
        try:
            pick(ctx.warehouses, parse(relation).warehouse)
        except UnknownWarehouse as exc:
            return f"on_relation {relation}: {exc}"
    if spec.on_relation:
        found = await _own_writes(ctx.bus, project, set(spec.on_relation))
        if found:
            relation, node = found
            return (
                f"cycle: job {name!r} would be triggered by {relation}, which {node} of its"
                f" own project {project!r} builds when the job runs"
            )
    if spec.after is not None:
        return await _after_cycle(ctx.bus, project, name, spec.after.job)
    return None


async def _after_cycle(bus, project: str, name: str, first: str) -> str | None:
    """The cycle `name` after `first` after … closes, if it comes back to `name`."""
    chain, current = [name], first
    while len(chain) <= MAX_CHAIN:
        chain.append(current)
        if current == name:
            return f"cycle: job {' after '.join(chain)} in project {project!r}"
        saved = await jobs.job_of(bus, project, current)
        after = (saved.spec.get("after") or {}) if saved is not None else {}
        if not isinstance(after, dict) or not after.get("job"):
            return None
        current = after["job"]
    return f"job {name!r}: a chain of more than {MAX_CHAIN} `after` triggers"


async def _own_writes(bus, project: str, relations: set[str]) -> tuple[str, str] | None:
    """(relation, model) for one of `relations` the deployed version of `project` builds."""
    deployed = await bus.last_event(subjects.deploy_event(project, "deployed"))
    if deployed is None:
        return None
    stored = await bus.last_event(subjects.graph_event(project, "version", deployed.version))
    if not isinstance(stored, ev.GraphIngested):
        return None
    graph = graph_mod.decode(await bus.get_blob(stored.graph_digest))
    for node in graph.nodes:
        if node.resource_type in _WRITES and node.relation:
            with contextlib.suppress(ValueError):
                key = parse(node.relation).key
                if key in relations:
                    return key, f"{node.resource_type} {node.name}"
    return None

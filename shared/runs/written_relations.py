"""Which relations a project's dbt writes, and which ones one run of it wrote: one rule for
the check a job's triggers get when it is saved and for the triggers service.

A project writes the relations of its model, seed and snapshot nodes (a source is read,
never written; an ephemeral model has no relation), as its deployed graph keys them
(jetdbt.shared.runs.relations), limited to the nodes it owns when its descriptor selects. Only a
command that builds relations writes one (build, run, seed, snapshot, and a retry of such
a run), and never one into a scratch schema: its relations are not the ones the graph keys.
A run wrote exactly the nodes its result says passed, whatever its selection was, so a
consumer of another relation of the project is not woken.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.project import slot_versions
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs import graph as graph_mod
from jetdbt.shared.runs.graph import SCOPE_RUN, SCOPE_VERSION, Graph
from jetdbt.shared.runs.relations import InvalidRelation, parse
from nats.js.errors import ObjectNotFoundError

__all__ = [
    "WRITER_TYPES",
    "WRITING_COMMANDS",
    "command_writes",
    "project_writes",
    "deployed_graph",
    "run_writes",
    "written",
]

WRITER_TYPES = ("model", "seed", "snapshot")
# The dbt commands that build relations (jetdbt.shared.bus.commands labels); a retry resumes one.
WRITING_COMMANDS = ("build", "run", "seed", "snapshot")
# A retry of a retry of … is followed this far back to the run it resumes.
MAX_RETRY_HOPS = 16


def command_writes(command: dict[str, Any]) -> bool:
    """Whether a dbt command, as a run or a job records it, writes the graph's relations."""
    return command.get("label") in WRITING_COMMANDS and not command.get("schema")


def _key(relation: str | None) -> str | None:
    if not relation:
        return None
    with contextlib.suppress(InvalidRelation):
        return parse(relation).key
    return None


def project_writes(graph: Graph) -> dict[str, str]:
    """Each relation the project writes, and the node that writes it (`model orders`)."""
    owned = set(graph.owned) if graph.owned is not None else None
    found = {}
    for node in graph.nodes:
        key = _key(node.relation) if node.resource_type in WRITER_TYPES else None
        if key is not None and (owned is None or node.unique_id in owned):
            found.setdefault(key, f"{node.resource_type} {node.name}")
    return found


def _wrote(graph: Graph, nodes: list[ev.NodeResult]) -> set[str]:
    """The relations of the writer nodes that passed in a run, keyed by the run's graph."""
    passed = {
        n.unique_id for n in nodes if n.outcome == "passed" and n.resource_type in WRITER_TYPES
    }
    return {
        key
        for node in graph.nodes
        if node.unique_id in passed and (key := _key(node.relation)) is not None
    }


async def _graph(bus: Bus, subject: str) -> Graph | None:
    """The graph the last GraphIngested on `subject` names; None when there is none. Raises
    ValueError when its blob is gone or unreadable (a retry would read the same)."""
    stored = await bus.last_event(subject)
    if not isinstance(stored, ev.GraphIngested):
        return None
    try:
        return graph_mod.decode(await bus.get_blob(stored.graph_digest))
    except (ObjectNotFoundError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"graph blob {stored.graph_digest} cannot be read: {exc}") from None


async def deployed_graph(bus: Bus, project: str) -> Graph | None:
    """The graph of the project's deployed version; None before its first deploy. Raises
    ValueError when its blob cannot be read."""
    deployed = await slot_versions.held_by(bus, project, DEFAULT_ENVIRONMENT)
    if not isinstance(deployed, ev.Deployed):
        return None
    return await _graph(bus, subjects.graph_event(project, SCOPE_VERSION, deployed.version))


async def _run_graph(bus: Bus, project: str, run_id: str) -> Graph | None:
    """The graph a run built against: its own snapshot (vars that move schemas store one),
    else its version's."""
    own = await _graph(bus, subjects.graph_event(project, SCOPE_RUN, run_id))
    if own is not None:
        return own
    started = await bus.last_event(subjects.run_event(project, run_id, "started"))
    if not isinstance(started, ev.RunStarted):
        return None
    return await _graph(bus, subjects.graph_event(project, SCOPE_VERSION, started.version))


async def run_writes(bus: Bus, requested: ev.RunRequested) -> bool:
    """Whether the run `requested` asked for writes the graph's relations (a retry: whether
    the run it resumes did)."""
    command = requested.command
    for _ in range(MAX_RETRY_HOPS):
        if command.get("label") != "retry":
            return command_writes(command)
        resumes = str(command.get("dbt_retry_job", ""))
        resumed = await bus.last_event(subjects.run_event(requested.project, resumes, "requested"))
        if not isinstance(resumed, ev.RunRequested):
            return False
        command = resumed.command
    return False


async def written(bus: Bus, finished: ev.RunFinished) -> set[str]:
    """The relations a finished run wrote (its nodes read back from their blob, if kept in
    one). Raises ValueError when the blob or the graph the run built against is not stored."""
    whole = await event_blobs.resolved(bus, finished)
    graph = await _run_graph(bus, finished.project, finished.run_id)
    if graph is None:
        raise ValueError(f"run {finished.run_id!r} of {finished.project!r} has no graph stored")
    return _wrote(graph, whole.result.nodes)

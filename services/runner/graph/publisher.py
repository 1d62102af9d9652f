"""Storing a graph and saying so: the blob under its digest, then GraphIngested naming it.

Events stay small; the graph projector folds the blob into tables. A deploy stores
the version's graph, a run that may change the model set its own snapshot, a parse
of an undeployed bundle a graph keyed by its run alone (see the package docstring).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.graph.builder import build_graph, target_database
from jetdbt.services.runner.graph.columns import ColumnIndex, column_index
from jetdbt.services.runner.setup import ownership, selection
from jetdbt.services.runner.setup.job_setup import Prepared
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import DbtCommand
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.runs.graph import SCOPE_PARSE, SCOPE_RUN, SCOPE_VERSION

__all__ = [
    "GraphRefreshFailed",
    "publish_graph",
    "ingest_version_graph",
    "version_graph_digest",
    "needs_run_graph",
    "refresh_run_graph",
]


class GraphRefreshFailed(RuntimeError):
    """A run that had to refresh its graph could not; it fails rather than show a stale one."""


async def version_graph_digest(bus: Bus, project: str, version: str) -> str | None:
    """The digest of the version's deployed graph, read from the stream (runners never
    read projections)."""
    event = await bus.last_event(subjects.graph_event(project, SCOPE_VERSION, version))
    return event.content_digest if isinstance(event, ev.GraphIngested) else None


async def publish_graph(
    ctx: RunnerContext,
    project: str,
    version: str,
    manifest: dict,
    warehouse: str,
    *,
    run_id: str | None = None,
    owned: set[str] | None = None,
    base_digest: str | None = None,
    principal: str = "",
    columns: ColumnIndex | None = None,
    resolved_root: str = "",
) -> ev.GraphIngested | None:
    """Store the graph blob and publish GraphIngested; None when a run's snapshot equals
    `base_digest` (the version's graph), since the run reads the version's back.
    `resolved_root` is where the target resolved to (see resolved_root())."""
    scope = SCOPE_VERSION if run_id is None else (SCOPE_RUN if version else SCOPE_PARSE)
    graph = build_graph(
        manifest,
        warehouse,
        target_database(manifest),
        owned=owned if scope == SCOPE_VERSION else None,
        columns=columns,
    )
    log = jlog.get("graph", project=project, scope=scope, run_id=run_id)
    if scope == SCOPE_RUN and graph.digest == base_digest:
        log.info("graph_unchanged", digest=graph.digest)
        return None
    blob = msgspec.json.encode(graph)
    event = ev.GraphIngested(
        project=project,
        version=version,
        run_id=run_id,
        scope=scope,
        graph_digest=await ctx.bus.put_blob(blob),
        graph_size=len(blob),
        content_digest=graph.digest,
        node_count=len(graph.nodes),
        edge_count=len(graph.edges),
        principal=principal,
        resolved_root=resolved_root,
    )
    await ctx.bus.publish(event)
    log.info("graph_ingested", digest=graph.digest, nodes=len(graph.nodes), bytes=len(blob))
    return event


async def ingest_version_graph(
    ctx: RunnerContext,
    prepared: Prepared,
    project: str,
    version: str,
    manifest: bytes,
    principal: str = "",
) -> str | None:
    """The deploy's step after `dbt parse`: the version's graph with what the descriptor's
    selection owns. Returns why it failed (the deploy fails with it), or None."""
    try:
        owned = await ownership.owned_nodes(prepared, ctx.settings.run_timeout_seconds)
    except selection.SelectionFailed as exc:
        return f"the descriptor's selection could not be resolved for the graph: {exc}"
    columns = None
    if prepared.descriptor.column_lineage:
        log = jlog.get("graph", project=project, version=version)

        async def note(line: str) -> None:
            log.info("column_lineage", line=line)

        columns = await column_index(prepared, note, ctx.settings.run_timeout_seconds / 2)
    await publish_graph(
        ctx,
        project,
        version,
        msgspec.json.decode(manifest),
        prepared.plan.warehouse,
        owned=owned,
        principal=principal,
        columns=columns,
        resolved_root=resolved_root(prepared),
    )
    return None


def resolved_root(prepared: Prepared) -> str:
    """Where this job's target resolves (warehouse, target, schema, database), the key a
    version's graph is published under; "" when only dbt knows (a templated schema)."""
    environment = prepared.plan.environment
    return environment.key() if environment is not None else ""


async def _moved(ctx: RunnerContext, prepared: Prepared, project: str, version: str) -> bool:
    """Whether the target now resolves elsewhere than where the version's graph was
    published (an operator changed the warehouse's schema or database, say)."""
    now = resolved_root(prepared)
    if not now or not version:
        return False
    event = await ctx.bus.last_event(subjects.graph_event(project, SCOPE_VERSION, version))
    published = event.resolved_root if isinstance(event, ev.GraphIngested) else ""
    return bool(published) and published != now


def needs_run_graph(prepared: Prepared, cmd: DbtCommand | None) -> bool:
    """vars steer enabled, aliases, schemas and databases, so a dynamic descriptor or a run
    overriding vars or full_refresh cannot trust the deployed graph. A narrowed selection
    alone changes what is built, not what exists, and does not re-ingest."""
    if prepared.plan.dynamic:
        return True
    if cmd is None:
        return False
    return bool(cmd.vars) or (cmd.full_refresh and not prepared.descriptor.full_refresh)


async def refresh_run_graph(
    ctx: RunnerContext,
    prepared: Prepared,
    project: str,
    version: str,
    run_id: str,
    cmd: DbtCommand | None,
    *,
    principal: str = "",
    on_line: Callable[[str], Awaitable[None]] | None = None,
) -> ev.GraphIngested | None:
    """Before the build: parse with this run's vars and store the run's own graph when it
    differs from the version's, so a model a placeholder enables appears in the run that
    builds it. A run of the version as deployed whose target moved since its graph was
    published republishes the version's graph instead (relations keyed where they now
    are; no later run sees the move again). Raises GraphRefreshFailed when a parse fails."""
    snapshot = needs_run_graph(prepared, cmd)
    republish = not snapshot and prepared.plan.publishes_ownership()
    if not (snapshot or (republish and await _moved(ctx, prepared, project, version))):
        return None
    parse = prepared.dbt("parse", prepared.plan.common_args())
    code = await parse.run(on_line, timeout=ctx.settings.run_timeout_seconds)
    manifest = parse.artifact("manifest.json")
    if code != 0 or manifest is None:
        raise GraphRefreshFailed("dbt parse for this run's graph failed:\n" + parse.error_tail())
    if not snapshot:
        data = parse.artifact_path("manifest.json").read_bytes()
        reason = await ingest_version_graph(ctx, prepared, project, version, data, principal)
        if reason:
            raise GraphRefreshFailed(reason)
        return None
    columns = None
    if prepared.descriptor.column_lineage:
        columns = await column_index(
            prepared, on_line or _discard, ctx.settings.run_timeout_seconds / 2
        )
    base = await version_graph_digest(ctx.bus, project, version) if version else None
    return await publish_graph(
        ctx,
        project,
        version,
        manifest,
        prepared.plan.warehouse,
        run_id=run_id,
        base_digest=base,
        principal=principal,
        columns=columns,
    )


async def _discard(line: str) -> None:
    return None

"""A project's graph: nodes, ref()/source edges, relation keys and optional column lineage.

`build_graph` is a pure function of manifest.json (plus the engine's parquet index
when the project opted into column lineage). `publish_graph` stores the graph in
the object store under its digest and publishes GraphIngested naming it: events
stay small, and the graph projector folds the blob into tables.

Three scopes. A deploy stores the VERSION's graph (what every run of it reads).
A run whose vars can change the model set (dynamic descriptor, vars or
full_refresh override) re-ingests before it builds and stores its own snapshot,
but only when its digest differs from the version's. A parse of an undeployed
bundle (version "") stores a graph keyed by that job alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from services.runner import engine, ownership, selection
from services.runner.context import RunnerContext
from services.runner.job_setup import Prepared
from shared import events as ev
from shared import logging as jlog
from shared import subjects
from shared.bus import Bus
from shared.commands import BuildCommand
from shared.digests import digest_of
from shared.graph import (
    SCOPE_PARSE,
    SCOPE_RUN,
    SCOPE_VERSION,
    Column,
    ColumnEdge,
    Graph,
    GraphEdge,
    GraphNode,
    TypedColumn,
)
from shared.relations import relation_key

__all__ = [
    "ColumnIndex",
    "GraphRefreshFailed",
    "build_graph",
    "target_database",
    "read_column_index",
    "column_index",
    "publish_graph",
    "ingest_version_graph",
    "version_graph_digest",
    "needs_run_graph",
    "refresh_run_graph",
    "MAX_COLUMN_EDGES",
]

# manifest["nodes"] types kept as graph nodes; sources and exposures come from their own maps.
_NODE_TYPES = frozenset({"model", "seed", "snapshot", "test"})
_RELATION_TYPES = frozenset({"model", "seed", "snapshot"})
# A scan edge reaches every output column of its model, so it is most of an index;
# when the bound bites, value lineage (copy, mod) is what is kept.
MAX_COLUMN_EDGES = 200_000
_VALUE_KINDS = ("copy", "mod")
LINEAGE_FILE = "dbt.column_lineage.parquet"
COLUMNS_FILE = "dbt.node_columns.parquet"
INDEX_TARGET = "target-index"
NO_INDEX_NOTE = (
    "column_lineage: engine dbt-core-1x has no --write-index flag, so this graph has no"
    " column lineage (engines dbt-core-2x and fusion write it)"
)


class ColumnIndex(msgspec.Struct, frozen=True, kw_only=True):
    """What one read of the engine's index gave; `notes` go to the job log."""

    edges: list[ColumnEdge]
    schemas: dict[str, list[TypedColumn]]
    notes: list[str] = []


class GraphRefreshFailed(RuntimeError):
    """A run that had to refresh its graph could not; it fails rather than show a stale one."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def target_database(manifest: dict) -> str | None:
    """The database dbt resolved for nodes that do not override it: the target's default.

    Read from the manifest, so every adapter and a project's own profiles.yml answer the
    same way dbt does. None when every node overrides it, and then every relation qualifies.
    """
    found = Counter(
        node.get("database")
        for node in manifest.get("nodes", {}).values()
        if node.get("resource_type") in _NODE_TYPES
        and not (node.get("config") or {}).get("database")
        and node.get("database")
    )
    return min(found, key=lambda db: (-found[db], db)) if found else None


def _node(
    raw: dict, warehouse: str, default_database: str | None, schema: list[TypedColumn] | None
) -> GraphNode:
    kind = raw.get("resource_type", "")
    config = raw.get("config") or {}
    relation = None
    # A model names its table by alias, a source by identifier; ephemeral models have none.
    physical = raw.get("alias") if kind in _RELATION_TYPES else raw.get("identifier")
    if (kind in _RELATION_TYPES and raw.get("relation_name")) or kind == "source":
        relation = relation_key(
            warehouse,
            raw.get("database"),
            raw["schema"],
            physical or raw["name"],
            default_database,
        )
    test_kind = severity = None
    if kind == "test":
        meta = raw.get("test_metadata") or {}
        test_kind = ".".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
        test_kind = test_kind or "singular"
        severity = str(config.get("severity") or "error").lower()
    columns = [
        Column(
            name=col.get("name") or name,
            description=_text(col.get("description")),
            data_type=col.get("data_type"),
        )
        for name, col in (raw.get("columns") or {}).items()
    ]
    return GraphNode(
        unique_id=raw["unique_id"],
        resource_type=kind,
        name=raw.get("name", ""),
        package=raw.get("package_name", ""),
        relation=relation,
        materialized=config.get("materialized"),
        tags=list(raw.get("tags") or []),
        description=_text(raw.get("description")),
        columns=columns,
        column_schema=schema,
        test_severity=severity,
        test_kind=test_kind,
        attached_node=raw.get("attached_node"),
        raw_code=_text(raw.get("raw_code")),
    )


def _digest(graph: Graph) -> str:
    body = msgspec.json.encode(
        [graph.relation_root, graph.default_database, graph.nodes, graph.edges, graph.column_edges]
    )
    return digest_of(body)


def build_graph(
    manifest: dict,
    warehouse: str,
    default_database: str | None,
    *,
    owned: set[str] | None = None,
    columns: ColumnIndex | None = None,
) -> Graph:
    """The graph of one manifest, keyed on relations under `warehouse` (a configured name)."""
    schemas = columns.schemas if columns else {}
    raws = [n for n in manifest.get("nodes", {}).values() if n.get("resource_type") in _NODE_TYPES]
    raws += list(manifest.get("sources", {}).values())
    raws += list(manifest.get("exposures", {}).values())
    nodes = sorted(
        (_node(r, warehouse, default_database, schemas.get(r["unique_id"])) for r in raws),
        key=lambda n: n.unique_id,
    )
    ids = {n.unique_id for n in nodes}
    edges = sorted(
        {
            GraphEdge(parent, r["unique_id"], "source" if parent.startswith("source.") else "ref")
            for r in raws
            for parent in (r.get("depends_on") or {}).get("nodes") or []
            if parent in ids
        }
    )
    graph = Graph(
        relation_root=f"dbt://{warehouse}",
        default_database=default_database,
        nodes=nodes,
        edges=edges,
        column_edges=columns.edges if columns else [],
        owned=sorted(owned) if owned is not None else None,
    )
    return msgspec.structs.replace(graph, digest=_digest(graph))


def _pick(row: dict, *names: str) -> Any:
    """The first of several spellings engine releases have used for one index column."""
    return next((row[n] for n in names if row.get(n) is not None), None)


def _read(path: Path, notes: list[str]) -> list[dict] | None:
    if not path.exists():
        notes.append(f"column_lineage: {path.name} was not written")
        return None
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        notes.append(f"column_lineage: {path.name} is unreadable ({exc})")
        return None


def read_column_index(index_dir: Path, bound: int = MAX_COLUMN_EDGES) -> ColumnIndex | None:
    """Column edges and typed column schemas from the engine's index; best effort, never raises.

    None when neither file is there. A partial index (a failed analysis still writes the
    edges of the models that analyzed) is a normal result; `notes` says what is missing.
    """
    if not any((index_dir / name).exists() for name in (LINEAGE_FILE, COLUMNS_FILE)):
        return None
    notes: list[str] = []
    lineage = _read(index_dir / LINEAGE_FILE, notes)
    cols = _read(index_dir / COLUMNS_FILE, notes)
    edges = [
        ColumnEdge(
            str(_pick(r, "from_node_unique_id", "parent_node_unique_id")),
            str(_pick(r, "from_column_name", "parent_column_name")),
            str(_pick(r, "to_node_unique_id", "child_node_unique_id")),
            str(_pick(r, "to_column_name", "child_column_name")),
            str(_pick(r, "lineage_kind", "evolution") or ""),
        )
        for r in lineage or []
    ]
    edges = sorted(set(edges))
    if len(edges) > bound:
        edges.sort(key=lambda e: e.lineage_kind.lower() not in _VALUE_KINDS)  # stable
        notes.append(
            f"column_lineage: kept {bound} of {len(edges)} column edges (copy and mod first)"
        )
        edges = sorted(edges[:bound])
    ordered: dict[str, list[tuple[int, int, TypedColumn]]] = {}
    for pos, r in enumerate(cols or []):
        node = _pick(r, "unique_id", "node_unique_id")
        name = _pick(r, "column_name", "name")
        if node is None or name is None:
            continue
        index = _pick(r, "column_index")
        ordered.setdefault(str(node), []).append(
            (
                pos if index is None else int(index),
                pos,
                TypedColumn(
                    name=str(name),
                    declared_type=_pick(r, "declared_type", "data_type_declared"),
                    inferred_type=_pick(r, "inferred_type", "data_type_inferred"),
                    description=str(_pick(r, "description") or ""),
                ),
            )
        )
    schemas = {node: [c for _, _, c in sorted(rows)] for node, rows in ordered.items()}
    return ColumnIndex(edges=edges, schemas=schemas, notes=notes)


async def column_index(
    prepared: Prepared, on_line: Callable[[str], Awaitable[None]], timeout: float | None
) -> ColumnIndex | None:
    """The opt-in static-analysis pass (descriptor `column_lineage: true`).

    A separate `dbt compile` with its own target path, because strict analysis rejects
    SQL a build accepts. It takes the run's --full-refresh, since is_incremental() steers
    what compiles. Everything about the artifact is best effort and logged; a timeout or a
    cancel still propagates, because those belong to the job.
    """
    plan = prepared.plan
    if plan.engine == engine.DEFAULT:
        await on_line(NO_INDEX_NOTE)
        return None
    args = [*plan.common_args(), "--static-analysis", "strict", "--write-index"]
    if plan.full_refresh:
        args.append("--full-refresh")
    compile_ = prepared.dbt("compile", args, log_dir="logs-index", target_dir=INDEX_TARGET)
    code = await compile_.run(timeout=timeout)
    found = read_column_index(compile_.artifact_path("index"))
    if found is None:
        await on_line(f"column_lineage: no index appeared (dbt compile exited {code}):")
        for line in compile_.error_tail().splitlines():
            await on_line(line)
        return None
    for note in found.notes:
        await on_line(note)
    return found


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
) -> ev.GraphIngested | None:
    """Store the graph blob and publish GraphIngested; None when a run's snapshot equals
    `base_digest` (the version's graph), since the run reads the version's back."""
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
            log.info("column_lineage", line=prepared.resolver.mask(line))

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
    )
    return None


def needs_run_graph(prepared: Prepared, cmd: BuildCommand | None) -> bool:
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
    cmd: BuildCommand | None,
    *,
    principal: str = "",
    on_line: Callable[[str], Awaitable[None]] | None = None,
) -> ev.GraphIngested | None:
    """Before the build: parse with this run's vars and store the run's own graph when it
    differs from the version's, so a model a placeholder enables appears in the run that
    builds it. Raises GraphRefreshFailed when the parse fails."""
    if not needs_run_graph(prepared, cmd):
        return None
    parse = prepared.dbt("parse", prepared.plan.common_args())
    code = await parse.run(on_line, timeout=ctx.settings.run_timeout_seconds)
    manifest = parse.artifact("manifest.json")
    if code != 0 or manifest is None:
        raise GraphRefreshFailed("dbt parse for this run's graph failed:\n" + parse.error_tail())
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

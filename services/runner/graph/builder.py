"""A project's graph as a pure function of its manifest.json: nodes, ref()/source edges,
relation keys, plus the engine's column index when the project opted into lineage."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from jetdbt.services.runner.graph.columns import ColumnIndex
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.runs.graph import Column, Graph, GraphEdge, GraphNode, TypedColumn
from jetdbt.shared.runs.relations import relation_key

__all__ = ["build_graph", "target_database"]

# manifest["nodes"] types kept as graph nodes; sources and exposures come from their own maps.
_NODE_TYPES = frozenset({"model", "seed", "snapshot", "test"})
_RELATION_TYPES = frozenset({"model", "seed", "snapshot"})


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

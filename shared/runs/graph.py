"""The graph blob's schema: what a runner stores and the graph projector folds.

Runners build it from manifest.json (services/runner/graph/); the projector
reads it back from the object store by the digest GraphIngested names.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "Graph",
    "GraphNode",
    "GraphEdge",
    "Column",
    "TypedColumn",
    "ColumnEdge",
    "SCOPE_VERSION",
    "SCOPE_RUN",
    "SCOPE_PARSE",
    "decode",
]

SCOPE_VERSION, SCOPE_RUN, SCOPE_PARSE = "version", "run", "parse"


class Column(msgspec.Struct, frozen=True, kw_only=True):
    """A column an author declared in schema.yml."""

    name: str
    description: str = ""
    data_type: str | None = None


class TypedColumn(msgspec.Struct, frozen=True, kw_only=True):
    """A column as the engine's static analysis sees it, in the order the model emits it."""

    name: str
    declared_type: str | None = None
    inferred_type: str | None = None
    description: str = ""


class GraphNode(msgspec.Struct, frozen=True, kw_only=True):
    unique_id: str
    resource_type: str
    name: str
    package: str = ""
    relation: str | None = None
    materialized: str | None = None
    tags: list[str] = []
    description: str = ""
    columns: list[Column] = []
    column_schema: list[TypedColumn] | None = None
    test_severity: str | None = None
    test_kind: str | None = None
    attached_node: str | None = None
    raw_code: str = ""


class GraphEdge(msgspec.Struct, frozen=True, array_like=True, order=True):
    parent: str
    child: str
    kind: str  # "ref" or "source"


class ColumnEdge(msgspec.Struct, frozen=True, array_like=True, order=True):
    from_node: str
    from_column: str
    to_node: str
    to_column: str
    lineage_kind: str  # text, not an enum: the engine may add kinds


class Graph(msgspec.Struct, frozen=True, kw_only=True):
    """`owned` lists the unique ids the project claims (None: all of it). It is outside the
    digest: a run's snapshot never claims anything, so ownership must not make it differ."""

    relation_root: str
    default_database: str | None
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    column_edges: list[ColumnEdge] = []
    owned: list[str] | None = None
    digest: str = ""


_decoder = msgspec.json.Decoder(Graph)


def decode(data: bytes) -> Graph:
    return _decoder.decode(data)

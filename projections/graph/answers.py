"""What the graph projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime

import msgspec
from jetdbt.projections.answers import Answer, NextAfter
from jetdbt.projections.catalog.answers import NodeCatalog
from jetdbt.projections.freshness.answers import SourceFreshness
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs.graph import Column, TypedColumn

# The fields that are no column of a table (tables.py), with what each is made from.
COMPUTED = {
    "GraphNode.row": "layer_row: the node's place in its layer",
    "Graph.fallback": "whether a run's page is its version's graph, the run having stored none",
    "Reader.reads_through": "the reading project's node that reads the relation (an edge's parent)",
    "Relation.truncated": "the lists cut at the route's row cap",
    "Overlap.relations": "the relations both projects write, the first few",
    "Overlap.count": "how many relations both projects write",
}


class DeclaredWrite(Answer):
    """The latest write another system declared on a relation."""

    producer: str
    status: str
    row_count: int | None
    written_at: datetime


class GraphNode(Answer):
    unique_id: str
    resource_type: str
    name: str
    package: str
    relation: str | None
    owned: bool
    materialized: str | None
    tags: list[str]
    description: str
    columns: list[Column]
    column_schema: list[TypedColumn] | None
    test_severity: str | None
    test_kind: str | None
    attached_node: str | None
    raw_code: str
    declared_writes: list[DeclaredWrite]
    # What the warehouse said of the node, kept per project and node whatever the version:
    # a source's last freshness check, and the columns of the last catalog that listed it.
    freshness: SourceFreshness | None
    catalog: NodeCatalog | None
    # Where the viewer draws a model, seed or snapshot: the column of its topological
    # generation in the whole graph, and its place in that column (else null).
    layer: int | None
    row: int | None


class Edge(Answer):
    parent: str
    child: str
    kind: str


class ColumnEdge(Answer):
    from_node: str
    from_column: str
    to_node: str
    to_column: str
    lineage_kind: str


class Graph(Answer):
    """A page of a graph's nodes, with the edges whose child is in the page."""

    project: str
    version: str
    scope: str
    graph_digest: str
    content_digest: str
    relation_root: str
    default_database: str | None
    principal: str
    ingested_at: datetime
    run_id: str | None
    nodes: list[GraphNode]
    edges: list[Edge]
    column_edges: list[ColumnEdge]
    next: NextAfter | None
    # A run's graph only: true when the run stored no snapshot and its version's is served.
    fallback: bool | msgspec.UnsetType = msgspec.UNSET


class RelationNode(Answer):
    project: str
    version: str
    unique_id: str
    resource_type: str
    name: str
    owned: bool
    materialized: str | None


class DbtProducer(Answer, tag_field="kind", tag="dbt"):
    project: str
    unique_id: str


class DeclaredProducer(Answer, tag_field="kind", tag="declared"):
    producer: str
    last_write: DeclaredWrite


class Reader(Answer):
    """A node that reads the relation (downstream), through one of the relation's nodes."""

    project: str
    unique_id: str
    resource_type: str
    name: str
    relation: str | None
    reads_through: str


class Upstream(Answer):
    """A node a producer of the relation reads (a model, a seed, a source)."""

    project: str
    unique_id: str
    resource_type: str
    name: str
    relation: str | None


class RelationWrite(Answer):
    producer: str
    status: str
    row_count: int | None
    written_at: datetime
    refused_reason: str | None


class RelationRun(Answer):
    """A run whose node built the relation: the latest WRITES_SHOWN, unfinished ones first."""

    run_id: str
    project: str
    unique_id: str
    status: str
    outcome: str | None
    finished_at: datetime | None
    # The environment the run built it in, and the pull request it checked (0: none).
    environment: str = DEFAULT_ENVIRONMENT
    pr: int = 0


class Relation(Answer):
    """Who produces and who reads one relation; `truncated` names the lists that were cut."""

    relation: str
    nodes: list[RelationNode]
    producers: list[DbtProducer | DeclaredProducer]
    readers: list[Reader]
    upstream: list[Upstream]
    writes: list[RelationWrite]
    runs: list[RelationRun]
    truncated: list[str]


class Overlap(Answer):
    """Another project of the warehouse that writes relations the project writes too: the
    first of them (sorted) and how many. `project` is None for a project the token may not
    read: its name is not the token's to know, only that the relations are shared."""

    project: str | None
    relations: list[str]
    count: int


class Overlaps(Answer):
    """What the project's latest deployed version writes that other projects' latest
    versions write too (`version` None: nothing deployed yet)."""

    project: str
    version: str | None
    overlaps: list[Overlap]

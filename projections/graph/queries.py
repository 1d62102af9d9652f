"""The graph projection's reads: a stored graph a page at a time with what a page adds to it
(declared writes, what the warehouse said of its nodes), one relation across the projects'
current graphs, and the relations a project's graph shares with the others'."""

from __future__ import annotations

from typing import NamedTuple

import msgspec
from jetdbt.projections.answers import Database, NextAfter, shaped
from jetdbt.projections.catalog.queries import node_catalogs
from jetdbt.projections.freshness.queries import source_freshness
from jetdbt.projections.graph.answers import (
    ColumnEdge,
    DeclaredWrite,
    Edge,
    Graph,
    GraphNode,
    Overlap,
    Reader,
    RelationNode,
    RelationRun,
    RelationWrite,
    Upstream,
)
from jetdbt.projections.graph.fold import DEPLOYED
from jetdbt.projections.graph.layers import PRODUCING
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs.graph import SCOPE_VERSION

__all__ = [
    "PRODUCING",
    "GraphKey",
    "GraphState",
    "WRITES_SHOWN",
    "deployed_graph",
    "run_graph_key",
    "graph_state",
    "graph_page",
    "declared_writes",
    "relation_nodes",
    "relation_readers",
    "relation_upstream",
    "relation_writes",
    "relation_runs",
    "overlaps",
]

WRITES_SHOWN = 50  # a relation's latest writes, and producers declared per relation
# The projectors whose checkpoints move whenever a graph page can change: the graph's own,
# and those of what the warehouse said of its nodes (freshness, catalog types).
_FOLDS = ["catalog", "freshness", "graph"]
# Each project's current graph, as `latest` (project, version, run_id); $2 is
# SCOPE_VERSION: the graph of the version its default environment runs, else (nothing
# promoted yet) of its latest deployed one, so a pull request's or an unpromoted version is
# never what a project is shown as. What a project writes is what this graph's owned
# producers build.
_LATEST = (
    "WITH latest AS (SELECT DISTINCT ON (g.project) g.project, g.version, g.run_id"
    " FROM graph_versions g LEFT JOIN environment_versions e"
    f" ON e.project = g.project AND e.slot = '{DEFAULT_ENVIRONMENT}' WHERE g.scope = $2"
    " ORDER BY g.project, coalesce(g.version = e.version, false) DESC, g.stream_seq DESC)"
)
# $1 the project, $2 SCOPE_VERSION, $3 a version of it ("": its current one, as `latest`).
_MINE = (
    "SELECT * FROM latest WHERE project = $1 AND $3 = '' UNION ALL"
    " (SELECT project, version, run_id FROM graph_versions WHERE project = $1 AND scope = $2"
    " AND version = $3 ORDER BY stream_seq DESC LIMIT 1)"
)


class GraphKey(NamedTuple):
    """A stored graph: a version's is stored under run_id DEPLOYED, a run's snapshot under its
    run."""

    project: str
    version: str
    run_id: str


class GraphState(NamedTuple):
    """What a page of a graph can change with: the graph's digest, and the checkpoints of
    _FOLDS (in name order)."""

    digest: str
    checkpoints: list[int]


async def deployed_graph(db: Database, project: str, version: str = "") -> GraphKey | None:
    """The graph of the project's current version (`version` ""), else of `version`; None
    when there is no such graph."""
    row = await db.fetchrow(
        f"{_LATEST} SELECT project, version, run_id FROM ({_MINE}) m",
        project,
        SCOPE_VERSION,
        version,
    )
    return None if row is None else GraphKey(*row)


async def run_graph_key(db: Database, run_id: str) -> GraphKey | None:
    """The graph a run is served: its own snapshot when it stored one, else its version's
    (the normal case: a run whose graph matched the version's stored none); None when the
    run is unknown or has no version yet."""
    own = await db.fetchrow(
        "SELECT project, version FROM graph_versions WHERE run_id = $1 AND scope <> $2",
        run_id,
        SCOPE_VERSION,
    )
    if own is not None:
        return GraphKey(own["project"], own["version"], run_id)
    run = await db.fetchrow("SELECT project, version FROM runs WHERE run_id = $1", run_id)
    if run is None or not run["version"]:
        return None
    return GraphKey(run["project"], run["version"], DEPLOYED)


_WHERE = "WHERE project = $1 AND version = $2 AND run_id = $3"


async def graph_state(db: Database, project: str, version: str, run_id: str) -> GraphState | None:
    """The graph's state a page's ETag names; None when there is no such graph."""
    digest = await db.fetchval(
        f"SELECT graph_digest FROM graph_versions {_WHERE}", project, version, run_id
    )
    if digest is None:
        return None
    checkpoints = await db.fetchval(
        "SELECT array_agg(coalesce(c.last_seq, 0) ORDER BY f.name) FROM unnest($1::text[])"
        " AS f(name) LEFT JOIN checkpoints c ON c.projector = f.name",
        _FOLDS,
    )
    return GraphState(digest, checkpoints)


# Each node's and edge's JSON was made when it was stored (migration 024, `doc`), with the
# fields a read fills in (what the warehouse said, declared writes) empty: a page of 6,000
# nodes is one string to decode into its Structs (which checks its shape), not 6,000 rows of
# values each handed through a codec and then converted.
_NODES = (
    "SELECT '[' || coalesce(string_agg(doc, ',' ORDER BY unique_id), '') || ']'"
    f" FROM (SELECT unique_id, doc FROM graph_nodes {_WHERE}"
    " AND ($4::text IS NULL OR unique_id > $4) ORDER BY unique_id LIMIT $5) n"
)
_IN_PAGE = "($4::text IS NULL OR {0} > $4) AND ($5::text IS NULL OR {0} <= $5)"
_EDGES = (
    "SELECT '[' || coalesce(string_agg(doc, ',' ORDER BY parent, child), '') || ']'"
    f" FROM graph_edges {_WHERE} AND {_IN_PAGE.format('child')}"
)
_COLUMN_EDGES = (
    "SELECT coalesce(json_agg(x ORDER BY x.from_node, x.from_column, x.to_node, x.to_column),"
    " '[]')::text FROM (SELECT from_node, from_column, to_node, to_column, lineage_kind"
    f" FROM graph_column_edges {_WHERE} AND {_IN_PAGE.format('to_node')}) x"
)
_node_rows = msgspec.json.Decoder(list[GraphNode])
_edge_rows = msgspec.json.Decoder(list[Edge])
_column_edge_rows = msgspec.json.Decoder(list[ColumnEdge])


async def graph_page(
    db: Database, project: str, version: str, run_id: str, after: str | None, limit: int
) -> Graph | None:
    """The graph's `limit` nodes after `after` (None: from the first), with the edges and
    column edges whose child sorts into the page's range of ids; None when there is no such
    graph. Read it inside one repeatable-read transaction, so its parts agree."""
    key = (project, version, run_id)
    head = await db.fetchrow(
        "SELECT project, version, scope, graph_digest, content_digest, relation_root,"
        f" default_database, principal, ingested_at FROM graph_versions {_WHERE}",
        *key,
    )
    if head is None:
        return None
    nodes = _node_rows.decode(await db.fetchval(_NODES, *key, after, limit + 1))
    # The page's range of ids: after `after`, up to its last node unless it is the last page.
    last = nodes[limit - 1].unique_id if len(nodes) > limit else None
    nodes = nodes[:limit]
    await _add_said(db, project, nodes, after, last)
    writes = await declared_writes(db, [n.relation for n in nodes if n.relation])
    for node in nodes:
        node.declared_writes = writes.get(node.relation, node.declared_writes)
    return Graph(
        **dict(head),
        run_id=None if run_id == DEPLOYED else run_id,
        nodes=nodes,
        edges=_edge_rows.decode(await db.fetchval(_EDGES, *key, after, last)),
        column_edges=_column_edge_rows.decode(await db.fetchval(_COLUMN_EDGES, *key, after, last)),
        next=NextAfter(after=last) if last is not None else None,
    )


async def _add_said(
    db: Database, project: str, nodes: list[GraphNode], after: str | None, last: str | None
) -> None:
    """Set on the page's nodes what the warehouse said of them in their project: few rows, or
    none, beside the page, so read apart rather than looked up for each node."""
    freshness = await source_freshness(db, project, after, last)
    catalogs = await node_catalogs(db, project, after, last)
    for node in nodes:
        if node.resource_type == "source":
            node.freshness = freshness.get(node.unique_id, node.freshness)
        node.catalog = catalogs.get(node.unique_id, node.catalog)


async def declared_writes(db: Database, relations: list[str]) -> dict[str, list[DeclaredWrite]]:
    """The latest accepted write of each producer, per relation: the WRITES_SHOWN producers
    that wrote last."""
    rows = await db.fetch(
        "SELECT relation, producer, status, row_count, written_at FROM ("
        " SELECT *, row_number() OVER (PARTITION BY relation ORDER BY stream_seq DESC) AS nth"
        " FROM (SELECT DISTINCT ON (relation, producer) relation, producer, status,"
        " row_count, written_at, stream_seq FROM relation_writes"
        " WHERE relation = ANY($1::text[]) AND refused_reason IS NULL"
        " ORDER BY relation, producer, stream_seq DESC) latest"
        ") ranked WHERE nth <= $2 ORDER BY relation, producer",
        relations,
        WRITES_SHOWN,
    )
    out: dict[str, list[DeclaredWrite]] = {}
    for r in rows:
        row = dict(r)
        out.setdefault(row.pop("relation"), []).append(shaped(DeclaredWrite, row))
    return out


async def relation_nodes(db: Database, key: str, limit: int) -> list[RelationNode]:
    """The nodes of the projects' current graphs that name relation `key`, the first `limit`
    by project and id."""
    rows = await db.fetch(
        f"{_LATEST} SELECT n.project, n.version, n.unique_id, n.resource_type, n.name, n.owned,"
        " n.materialized FROM graph_nodes n JOIN latest l USING (project, version, run_id)"
        " WHERE n.relation = $1 ORDER BY n.project, n.unique_id LIMIT $3",
        key,
        SCOPE_VERSION,
        limit,
    )
    return _rows(RelationNode, rows)


# $1-$3 (project, version, unique_id) of nodes of current graphs, $4 DEPLOYED: a current
# graph is a version's, stored under DEPLOYED.
_OF_NODES = (
    "(e.project, e.version, e.{0}) IN"
    " (SELECT * FROM unnest($1::text[], $2::text[], $3::text[])) AND e.run_id = $4"
)


async def relation_readers(
    db: Database, projects: list[str], versions: list[str], unique_ids: list[str], limit: int
) -> list[Reader]:
    """The nodes that read the given nodes of the projects' current graphs (project, version
    and unique_id, one of each per node), the first `limit` by project and id."""
    rows = await db.fetch(
        "SELECT e.project, e.child AS unique_id, c.resource_type, c.name, c.relation,"
        " e.parent AS reads_through FROM graph_edges e JOIN graph_nodes c"
        " ON (c.project, c.version, c.run_id, c.unique_id)"
        " = (e.project, e.version, e.run_id, e.child)"
        f" WHERE {_OF_NODES.format('parent')} ORDER BY e.project, e.child LIMIT $5",
        projects,
        versions,
        unique_ids,
        DEPLOYED,
        limit,
    )
    return _rows(Reader, rows)


async def relation_upstream(
    db: Database, projects: list[str], versions: list[str], unique_ids: list[str], limit: int
) -> list[Upstream]:
    """The nodes the given nodes of the projects' current graphs read (project, version and
    unique_id, one of each per node), the first `limit` by project and id."""
    rows = await db.fetch(
        "SELECT DISTINCT e.project, e.parent AS unique_id, p.resource_type, p.name,"
        " p.relation FROM graph_edges e JOIN graph_nodes p"
        " ON (p.project, p.version, p.run_id, p.unique_id)"
        " = (e.project, e.version, e.run_id, e.parent)"
        f" WHERE {_OF_NODES.format('child')} ORDER BY e.project, e.parent LIMIT $5",
        projects,
        versions,
        unique_ids,
        DEPLOYED,
        limit,
    )
    return _rows(Upstream, rows)


async def relation_writes(db: Database, key: str, limit: int) -> list[RelationWrite]:
    """The latest `limit` writes other systems declared on relation `key`, refused ones too."""
    rows = await db.fetch(
        "SELECT producer, status, row_count, written_at, refused_reason"
        " FROM relation_writes WHERE relation = $1 ORDER BY stream_seq DESC LIMIT $2",
        key,
        limit,
    )
    return _rows(RelationWrite, rows)


async def relation_runs(
    db: Database, projects: list[str], unique_ids: list[str], limit: int
) -> list[RelationRun]:
    """The latest `limit` runs that built one of the given nodes (project and unique_id, one
    of each per node), unfinished ones first. Run nodes carry dbt's relation name, not the
    key: the relation's producing nodes say which they are."""
    rows = await db.fetch(
        "SELECT n.run_id, r.project, r.environment, r.pr, n.unique_id, n.status,"
        " n.outcome, n.finished_at FROM run_nodes n JOIN runs r USING (run_id)"
        " WHERE (r.project, n.unique_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
        " ORDER BY n.finished_at DESC NULLS FIRST, n.run_id LIMIT $3",
        projects,
        unique_ids,
        limit,
    )
    return _rows(RelationRun, rows)


# And $4 the producing resource types: the other projects' current graphs against `mine`.
_OVERLAPS = (
    f"{_LATEST}, mine AS ({_MINE}),"
    " graphs AS (SELECT * FROM latest WHERE project <> $1 UNION ALL SELECT * FROM mine),"
    " written AS (SELECT n.project, n.relation FROM graph_nodes n"
    " JOIN graphs g USING (project, version, run_id)"
    " WHERE n.owned AND n.relation IS NOT NULL AND n.resource_type = ANY($4::text[]))"
    " SELECT o.project, array_agg(DISTINCT o.relation ORDER BY o.relation) AS relations"
    " FROM written o JOIN written m ON m.relation = o.relation AND m.project = $1"
    " WHERE o.project <> $1 GROUP BY o.project ORDER BY o.project"
)


async def overlaps(db: Database, project: str, version: str, shown: int) -> list[Overlap]:
    """Each other project whose current graph writes relations that the project's graph of
    `version` ("": its current one) writes too, by name: the first `shown` relations and how
    many there are."""
    rows = await db.fetch(_OVERLAPS, project, SCOPE_VERSION, version, sorted(PRODUCING))
    return [
        Overlap(project=r["project"], relations=r["relations"][:shown], count=len(r["relations"]))
        for r in rows
    ]


def _rows(schema: type, records: list) -> list:
    """asyncpg's records as `schema`s."""
    return shaped(list[schema], [dict(r) for r in records])

"""Graph queries: a project's graph, a run's graph, and one relation across projects.

A run reads its own snapshot when it stored one, else its version's graph: a run
whose graph matched the version's stored nothing, so the fallback is the normal
case. A relation is answered from every project's latest deployed graph plus the
writes other systems declared on it, which is where two projects meet.

A graph is served a page of nodes at a time, by unique_id (`?after=` the last one
read); a page's edges and column edges are those whose child (to_node) sorts into
the page's range of ids, so every edge is served once. A relation's lists are capped
and say which were cut; its `runs` are the latest runs whose nodes built it.
"""

from __future__ import annotations

from typing import NamedTuple

import asyncpg
from aiohttp import web

from projections.graph import DEPLOYED
from services.api import schemas
from services.api.boundary import error, path, query, respond
from shared.graph import SCOPE_VERSION

__all__ = ["add_graph_routes", "NODES_PER_PAGE", "WRITES_SHOWN", "RELATION_ROWS"]

_PRODUCING = ("model", "seed", "snapshot")
NODES_PER_PAGE = 10_000  # the default and the most a graph page holds
WRITES_SHOWN = 50  # a relation's latest writes, and producers declared per relation
RELATION_ROWS = 1000  # nodes, and readers, of one relation


class _Nodes(NamedTuple):
    """A page of a graph's nodes: ids after `after`, at most `limit` of them."""

    after: str | None
    limit: int


def _nodes_page(request: web.Request) -> _Nodes:
    limit = min(query(request, "limit", NODES_PER_PAGE), NODES_PER_PAGE)
    return _Nodes(query(request, "after"), limit)


async def _writes(conn, relations: list[str]) -> dict[str, list[dict]]:
    """The latest accepted write of each producer, per relation: the WRITES_SHOWN producers
    that wrote last."""
    rows = await conn.fetch(
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
    out: dict[str, list[dict]] = {}
    for r in rows:
        row = dict(r)
        out.setdefault(row.pop("relation"), []).append(row)
    return out


def _without(record, key: str) -> dict:
    row = dict(record)
    row.pop(key)
    return row


async def _graph(conn, project: str, version: str, run_id: str, want: _Nodes) -> dict | None:
    key = (project, version, run_id)
    where = "WHERE project = $1 AND version = $2 AND run_id = $3"
    head = await conn.fetchrow(
        "SELECT project, version, scope, graph_digest, content_digest, relation_root,"
        f" default_database, principal, ingested_at FROM graph_versions {where}",
        *key,
    )
    if head is None:
        return None
    fetched = await conn.fetch(
        "SELECT unique_id, resource_type, name, package, relation, owned, materialized,"
        " tags, description, columns, column_schema, test_severity, test_kind,"
        f" attached_node, raw_code FROM graph_nodes {where}"
        " AND ($4::text IS NULL OR unique_id > $4) ORDER BY unique_id LIMIT $5",
        *key,
        want.after,
        want.limit + 1,
    )
    nodes = [dict(r) for r in fetched[: want.limit]]
    # The page's range of ids: after `after`, up to its last node unless it is the last page.
    last = nodes[-1]["unique_id"] if len(fetched) > want.limit else None
    in_page = "($4::text IS NULL OR {0} > $4) AND ($5::text IS NULL OR {0} <= $5)"
    edges = await conn.fetch(
        f"SELECT parent, child, kind FROM graph_edges {where}"
        f" AND {in_page.format('child')} ORDER BY parent, child",
        *key,
        want.after,
        last,
    )
    column_edges = await conn.fetch(
        "SELECT from_node, from_column, to_node, to_column, lineage_kind"
        f" FROM graph_column_edges {where} AND {in_page.format('to_node')}"
        " ORDER BY from_node, from_column, to_node, to_column",
        *key,
        want.after,
        last,
    )
    writes = await _writes(conn, [n["relation"] for n in nodes if n["relation"]])
    for node in nodes:
        node["declared_writes"] = writes.get(node["relation"], [])
    body = dict(head)
    body["run_id"] = None if run_id == DEPLOYED else run_id
    body["nodes"] = nodes
    body["edges"] = [dict(e) for e in edges]
    body["column_edges"] = [dict(c) for c in column_edges]
    body["next"] = {"after": last} if last is not None else None
    return body


def add_graph_routes(app: web.Application, pool: asyncpg.Pool) -> None:
    async def project_graph(request: web.Request) -> web.Response:
        project = path(request, "project")
        version = query(request, "version")
        async with pool.acquire() as conn:
            if version is None:
                version = await conn.fetchval(
                    "SELECT version FROM graph_versions WHERE project = $1 AND scope = $2"
                    " ORDER BY stream_seq DESC LIMIT 1",
                    project,
                    SCOPE_VERSION,
                )
            body = None
            if version:
                body = await _graph(conn, project, version, DEPLOYED, _nodes_page(request))
        if body is None:
            which = f"version {version!r}" if version else "any deployed version"
            return error(404, f"project {project!r} has no graph for {which}")
        return respond(schemas.shaped(schemas.Graph, body))

    async def run_graph(request: web.Request) -> web.Response:
        run_id = path(request, "run_id")
        want = _nodes_page(request)
        async with pool.acquire() as conn:
            own = await conn.fetchrow(
                "SELECT project, version FROM graph_versions WHERE run_id = $1 AND scope <> $2",
                run_id,
                SCOPE_VERSION,
            )
            if own is not None:
                body = await _graph(conn, own["project"], own["version"], run_id, want)
                fallback = False
            else:
                run = await conn.fetchrow(
                    "SELECT project, version FROM runs WHERE run_id = $1", run_id
                )
                body = None
                if run is not None and run["version"]:
                    body = await _graph(conn, run["project"], run["version"], DEPLOYED, want)
                fallback = True
        if body is None:
            return error(404, f"run {run_id!r} has no graph (yet)")
        body["run_id"] = run_id
        body["fallback"] = fallback
        return respond(schemas.shaped(schemas.Graph, body))

    async def relation(request: web.Request) -> web.Response:
        """Who produces and who reads one relation, what its producers read (upstream), who
        wrote it; each list capped, `truncated` names the lists that were cut."""
        key = path(request, "key")
        async with pool.acquire() as conn:
            nodes = await conn.fetch(
                "WITH latest AS (SELECT DISTINCT ON (project) project, version, run_id"
                " FROM graph_versions WHERE scope = $2 ORDER BY project, stream_seq DESC)"
                " SELECT n.project, n.version, n.run_id, n.unique_id, n.resource_type, n.name,"
                " n.owned, n.materialized FROM graph_nodes n"
                " JOIN latest l USING (project, version, run_id) WHERE n.relation = $1"
                " ORDER BY n.project, n.unique_id LIMIT $3",
                key,
                SCOPE_VERSION,
                RELATION_ROWS + 1,
            )
            nodes, cut_nodes = nodes[:RELATION_ROWS], len(nodes) > RELATION_ROWS
            producing = [n for n in nodes if n["resource_type"] in _PRODUCING and n["owned"]]
            readers = await conn.fetch(
                "SELECT e.project, e.child AS unique_id, c.resource_type, c.name, c.relation,"
                " e.parent AS reads_through FROM graph_edges e JOIN graph_nodes c"
                " ON (c.project, c.version, c.run_id, c.unique_id)"
                " = (e.project, e.version, e.run_id, e.child)"
                " WHERE (e.project, e.version, e.run_id, e.parent) IN"
                " (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))"
                " ORDER BY e.project, e.child LIMIT $5",
                [n["project"] for n in nodes],
                [n["version"] for n in nodes],
                [n["run_id"] for n in nodes],
                [n["unique_id"] for n in nodes],
                RELATION_ROWS + 1,
            )
            upstream = await conn.fetch(
                "SELECT DISTINCT e.project, e.parent AS unique_id, p.resource_type, p.name,"
                " p.relation FROM graph_edges e JOIN graph_nodes p"
                " ON (p.project, p.version, p.run_id, p.unique_id)"
                " = (e.project, e.version, e.run_id, e.parent)"
                " WHERE (e.project, e.version, e.run_id, e.child) IN"
                " (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))"
                " ORDER BY e.project, e.parent LIMIT $5",
                [n["project"] for n in producing],
                [n["version"] for n in producing],
                [n["run_id"] for n in producing],
                [n["unique_id"] for n in producing],
                RELATION_ROWS + 1,
            )
            writes = await conn.fetch(
                "SELECT producer, status, row_count, written_at, refused_reason"
                " FROM relation_writes WHERE relation = $1 ORDER BY stream_seq DESC LIMIT $2",
                key,
                WRITES_SHOWN,
            )
            declared = (await _writes(conn, [key])).get(key, [])
            runs = await conn.fetch(
                "SELECT n.run_id, r.project, n.unique_id, n.status, n.outcome, n.finished_at"
                " FROM run_nodes n JOIN runs r USING (run_id) WHERE n.relation = $1"
                " AND n.resource_type = ANY($2::text[])"
                " ORDER BY n.finished_at DESC NULLS FIRST, n.run_id LIMIT $3",
                key,
                list(_PRODUCING),
                WRITES_SHOWN,
            )
        dbt_producers = [
            {"kind": "dbt", "project": n["project"], "unique_id": n["unique_id"]} for n in producing
        ]
        declared_producers = [
            {"kind": "declared", "producer": w["producer"], "last_write": w} for w in declared
        ]
        cut = {
            "nodes": cut_nodes,
            "readers": len(readers) > RELATION_ROWS,
            "upstream": len(upstream) > RELATION_ROWS,
        }
        body = {
            "relation": key,
            "nodes": [_without(n, "run_id") for n in nodes],
            "producers": dbt_producers + declared_producers,
            "readers": [dict(r) for r in readers[:RELATION_ROWS]],
            "upstream": [dict(u) for u in upstream[:RELATION_ROWS]],
            "writes": [dict(w) for w in writes],
            "runs": [dict(r) for r in runs],
            "truncated": [name for name, was in cut.items() if was],
        }
        return respond(schemas.shaped(schemas.Relation, body))

    app.router.add_get("/v1/projects/{project}/graph", project_graph)
    app.router.add_get("/v1/runs/{run_id}/graph", run_graph)
    app.router.add_get("/v1/relations/{key:.+}", relation)

"""Graph queries: a project's graph, a run's graph, and one relation across projects.

A run reads its own snapshot when it stored one, else its version's graph: a run
whose graph matched the version's stored nothing, so the fallback is the normal
case. A relation is answered from every project's latest deployed graph plus the
writes other systems declared on it, which is where two projects meet.

A graph is served a page of nodes at a time, by unique_id (`?after=` the last one
read); a page's edges and column edges are those whose child (to_node) sorts into
the page's range of ids, so every edge is served once. A relation's lists are capped
and say which were cut; its `runs` are the latest runs whose nodes built it.

Each node also carries what the warehouse last said of it in its project, whichever
version or run the graph is of: a source its last freshness check, a node the columns
of the last catalog (`docs generate`) that listed it, with the warehouse's types.

A stored graph never changes; what a page adds to it (declared writes, retention,
freshness, catalog types) changes only when the graph, freshness or catalog fold
applies an event. So a page's ETag is its graph's digest, the page and those folds'
checkpoints: a client that has it gets a 304, and a page is encoded and
gzip-compressed once, kept in memory and served as is.
"""

from __future__ import annotations

import asyncio
import gzip
from collections import OrderedDict
from typing import NamedTuple

import asyncpg
import msgspec
from aiohttp import hdrs, web
from jetdbt.projections.graph.fold import DEPLOYED
from jetdbt.projections.graph.layers import PRODUCING
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs.graph import SCOPE_VERSION

__all__ = ["add_graph_routes", "LATEST_GRAPHS", "NODES_PER_PAGE", "WRITES_SHOWN", "RELATION_ROWS"]

NODES_PER_PAGE = 10_000  # the default and the most a graph page holds
WRITES_SHOWN = 50  # a relation's latest writes, and producers declared per relation
RELATION_ROWS = 1000  # nodes, and readers, of one relation
# Compressed graph pages kept in memory, the least recently served dropped first.
CACHED_BYTES = 64 * 1024 * 1024
# The projectors whose checkpoints move whenever a graph page can change: the graph's own,
# and those of what the warehouse said of its nodes (freshness, catalog types).
_FOLDS = ["catalog", "freshness", "graph"]
# Each project's current graph, as `latest` (project, version, run_id); $2 is
# SCOPE_VERSION: the graph of the version its default environment runs, else (nothing
# promoted yet) of its latest deployed one, so a pull request's or an unpromoted version is
# never what a project is shown as. What a project writes is what this graph's owned
# producers build.
LATEST_GRAPHS = (
    "WITH latest AS (SELECT DISTINCT ON (g.project) g.project, g.version, g.run_id"
    " FROM graph_versions g LEFT JOIN environment_versions e"
    f" ON e.project = g.project AND e.slot = '{DEFAULT_ENVIRONMENT}' WHERE g.scope = $2"
    " ORDER BY g.project, coalesce(g.version = e.version, false) DESC, g.stream_seq DESC)"
)


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


class _Pages:
    """Compressed graph pages by ETag, at most CACHED_BYTES of them (least recent out)."""

    def __init__(self, budget: int = CACHED_BYTES):
        self._pages: OrderedDict[str, bytes] = OrderedDict()
        self._size, self._budget = 0, budget

    def get(self, etag: str) -> bytes | None:
        page = self._pages.get(etag)
        if page is not None:
            self._pages.move_to_end(etag)
        return page

    def put(self, etag: str, page: bytes) -> None:
        if etag in self._pages or len(page) > self._budget:
            return
        self._pages[etag] = page
        self._size += len(page)
        while self._size > self._budget:
            _, dropped = self._pages.popitem(last=False)
            self._size -= len(dropped)


def _etag(graph_digest: str, checkpoints: list[int], want: _Nodes, served_as: tuple) -> str:
    """Weak: the same page may go out compressed or not."""
    tag = msgspec.json.encode([graph_digest, checkpoints, want.after, want.limit, *served_as])
    return f'W/"{digest_of(tag)[7:]}"'


def _not_modified(request: web.Request, etag: str) -> bool:
    held = request.headers.get(hdrs.IF_NONE_MATCH, "")
    return held.strip() == "*" or etag in (t.strip() for t in held.split(","))


def _page_response(request: web.Request, etag: str, page: bytes) -> web.Response:
    headers = {hdrs.ETAG: etag, hdrs.VARY: hdrs.ACCEPT_ENCODING}
    if "gzip" in request.headers.get(hdrs.ACCEPT_ENCODING, ""):
        headers[hdrs.CONTENT_ENCODING] = "gzip"
    else:
        page = gzip.decompress(page)
    return web.Response(body=page, headers=headers, content_type="application/json")


def _without(record, key: str) -> dict:
    row = dict(record)
    row.pop(key)
    return row


_WHERE = "WHERE project = $1 AND version = $2 AND run_id = $3"
_encoder = msgspec.json.Encoder()


async def _page(
    request: web.Request, conn, pages: _Pages, key: tuple[str, str, str], extra: dict
) -> web.Response | None:
    """The requested page of graph `key` (project, version, run_id) with the fields in
    `extra`: a 304 when the caller holds it, else from `pages` or read once into them.
    None when there is no such graph. Call it inside one repeatable-read transaction, so
    the checkpoint in the ETag is the state the page was read in."""
    head = await conn.fetchrow(
        "SELECT project, version, scope, graph_digest, content_digest, relation_root,"
        f" default_database, principal, ingested_at FROM graph_versions {_WHERE}",
        *key,
    )
    if head is None:
        return None
    want = _nodes_page(request)
    checkpoints = await conn.fetchval(
        "SELECT array_agg(coalesce(c.last_seq, 0) ORDER BY f.name) FROM unnest($1::text[])"
        " AS f(name) LEFT JOIN checkpoints c ON c.projector = f.name",
        _FOLDS,
    )
    etag = _etag(head["graph_digest"], checkpoints, want, sorted(extra.items()))
    if _not_modified(request, etag):
        return web.Response(status=304, headers={hdrs.ETAG: etag})
    page = pages.get(etag)
    if page is None:
        encoded = _encoder.encode(await _graph(conn, head, key, want, extra))
        # MBs, so not on the loop; level 1: a fifth larger than level 5, in half the time.
        page = await asyncio.to_thread(gzip.compress, encoded, 1)
        pages.put(etag, page)
    return _page_response(request, etag, page)


def _rows_json(select: str, order: str) -> str:
    """`select`'s rows as one JSON array, built by Postgres: a page of 6,000 nodes is one
    string to decode into its Structs (which checks its shape), not 6,000 rows of values
    each handed through a codec and then converted."""
    return f"SELECT coalesce(json_agg(x ORDER BY {order}), '[]')::text FROM ({select}) x"


# What the warehouse said of the nodes in a page's range of ids, in their project: a
# source's last freshness check and the last catalog's types. Few rows, or none, beside
# the page: read apart and set on its nodes, rather than looked up for each of them.
_SAID = _rows_json(
    "SELECT unique_id, json_build_object('status', status, 'outcome', outcome, 'message',"
    " message, 'max_loaded_at', max_loaded_at, 'snapshotted_at', snapshotted_at,"
    " 'age_seconds', age_seconds, 'warn_after', warn_after, 'error_after', error_after,"
    " 'run_id', run_id) AS freshness, NULL::json AS catalog FROM source_freshness"
    " WHERE project = $1 AND ($2::text IS NULL OR unique_id > $2)"
    " AND ($3::text IS NULL OR unique_id <= $3)"
    " UNION ALL SELECT unique_id, NULL, json_build_object('columns', columns, 'generated_at',"
    " generated_at, 'run_id', run_id) FROM node_catalog"
    " WHERE project = $1 AND ($2::text IS NULL OR unique_id > $2)"
    " AND ($3::text IS NULL OR unique_id <= $3)",
    "x.unique_id",
)
# Each node's and edge's JSON was made when it was stored (migration 024, `doc`), with the
# fields a read fills in (_SAID, declared writes) empty.
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
_COLUMN_EDGES = _rows_json(
    "SELECT from_node, from_column, to_node, to_column, lineage_kind FROM graph_column_edges"
    f" {_WHERE} AND {_IN_PAGE.format('to_node')}",
    "x.from_node, x.from_column, x.to_node, x.to_column",
)
_node_rows = msgspec.json.Decoder(list[schemas.GraphNode])


class _Said(msgspec.Struct, forbid_unknown_fields=True):
    unique_id: str
    freshness: schemas.SourceFreshness | None
    catalog: schemas.NodeCatalog | None


_said_rows = msgspec.json.Decoder(list[_Said])
_edge_rows = msgspec.json.Decoder(list[schemas.Edge])
_column_edge_rows = msgspec.json.Decoder(list[schemas.ColumnEdge])


async def _add_said(conn, project: str, nodes: list, after: str | None, last: str | None):
    """Set on the page's nodes what the warehouse said of them (_SAID)."""
    by_id = {node.unique_id: node for node in nodes}
    for said in _said_rows.decode(await conn.fetchval(_SAID, project, after, last)):
        node = by_id.get(said.unique_id)
        if node is None:
            continue
        if said.freshness is not None and node.resource_type == "source":
            node.freshness = said.freshness
        if said.catalog is not None:
            node.catalog = said.catalog


async def _graph(conn, head, key: tuple[str, str, str], want: _Nodes, extra: dict):
    """The page as its schema's Struct."""
    run_id = key[2]
    nodes = _node_rows.decode(await conn.fetchval(_NODES, *key, want.after, want.limit + 1))
    # The page's range of ids: after `after`, up to its last node unless it is the last page.
    last = nodes[want.limit - 1].unique_id if len(nodes) > want.limit else None
    nodes = nodes[: want.limit]
    await _add_said(conn, key[0], nodes, want.after, last)
    edges = _edge_rows.decode(await conn.fetchval(_EDGES, *key, want.after, last))
    column_edges = _column_edge_rows.decode(
        await conn.fetchval(_COLUMN_EDGES, *key, want.after, last)
    )
    writes = await _writes(conn, [n.relation for n in nodes if n.relation])
    for node in nodes:
        if node.relation in writes:
            node.declared_writes = schemas.shaped(
                list[schemas.DeclaredWrite], writes[node.relation]
            )
    return schemas.Graph(
        **{**dict(head), "run_id": None if run_id == DEPLOYED else run_id, **extra},
        nodes=nodes,
        edges=edges,
        column_edges=column_edges,
        next=schemas.NextAfter(after=last) if last is not None else None,
    )


async def _relation_problem(conn, request, key: str, nodes, readers) -> web.Response | None:
    """A 403 unless the token may read a project that writes or reads the relation (an
    admin may read every relation, one only other systems declared writes on too)."""
    token = auth.token_of(request)
    if token.role == "admin":
        return None
    projects = sorted({r["project"] for r in [*nodes, *readers]})
    for project in projects:
        if await auth.scope_problem(conn, token, project) is None:
            return None
    # Never which projects they are: another team's project names are not the token's to read.
    return error(
        403, f"relation {key!r} is written or read by no project token {token.id} may read"
    )


def add_graph_routes(app: web.Application, pool: asyncpg.Pool) -> None:
    pages = _Pages()

    async def project_graph(request: web.Request) -> web.Response:
        project = path(request, "project")
        version = query(request, "version")
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            if version is None:
                version = await conn.fetchval(
                    f"{LATEST_GRAPHS} SELECT version FROM latest WHERE project = $1",
                    project,
                    SCOPE_VERSION,
                )
            answer = None
            if version:
                answer = await _page(request, conn, pages, (project, version, DEPLOYED), {})
        if answer is None:
            which = f"version {version!r}" if version else "any deployed version"
            return error(404, f"project {project!r} has no graph for {which}")
        return answer

    async def run_graph(request: web.Request) -> web.Response:
        run_id = path(request, "run_id")
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            own = await conn.fetchrow(
                "SELECT project, version FROM graph_versions WHERE run_id = $1 AND scope <> $2",
                run_id,
                SCOPE_VERSION,
            )
            if own is not None:
                key = (own["project"], own["version"], run_id)
                answer = await _page(
                    request, conn, pages, key, {"run_id": run_id, "fallback": False}
                )
            else:
                run = await conn.fetchrow(
                    "SELECT project, version FROM runs WHERE run_id = $1", run_id
                )
                answer = None
                if run is not None and run["version"]:
                    key = (run["project"], run["version"], DEPLOYED)
                    answer = await _page(
                        request, conn, pages, key, {"run_id": run_id, "fallback": True}
                    )
        if answer is None:
            return error(404, f"run {run_id!r} has no graph (yet)")
        return answer

    async def relation(request: web.Request) -> web.Response:
        """Who produces and who reads one relation, what its producers read (upstream), who
        wrote it; each list capped, `truncated` names the lists that were cut."""
        key = path(request, "key")
        async with pool.acquire() as conn:
            nodes = await conn.fetch(
                f"{LATEST_GRAPHS} SELECT n.project, n.version, n.run_id, n.unique_id,"
                " n.resource_type, n.name, n.owned, n.materialized FROM graph_nodes n"
                " JOIN latest l USING (project, version, run_id) WHERE n.relation = $1"
                " ORDER BY n.project, n.unique_id LIMIT $3",
                key,
                SCOPE_VERSION,
                RELATION_ROWS + 1,
            )
            nodes, cut_nodes = nodes[:RELATION_ROWS], len(nodes) > RELATION_ROWS
            producing = [n for n in nodes if n["resource_type"] in PRODUCING and n["owned"]]
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
            refused = await _relation_problem(conn, request, key, nodes, readers)
            if refused is not None:
                return refused
            declared = (await _writes(conn, [key])).get(key, [])
            # Run nodes carry dbt's relation name, not the key: the producing nodes say which.
            runs = await conn.fetch(
                "SELECT n.run_id, r.project, r.environment, r.pr, n.unique_id, n.status,"
                " n.outcome, n.finished_at FROM run_nodes n JOIN runs r USING (run_id)"
                " WHERE (r.project, n.unique_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
                " ORDER BY n.finished_at DESC NULLS FIRST, n.run_id LIMIT $3",
                [n["project"] for n in producing],
                [n["unique_id"] for n in producing],
                WRITES_SHOWN,
            )
        if not nodes and not writes and not declared:
            return error(
                404,
                f"relation {key!r} is not known: no deployed project's graph has it and no"
                " system declared a write of it",
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

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
import weakref
from collections import OrderedDict
from typing import NamedTuple

import msgspec
from aiohttp import hdrs, web
from jetdbt.projections.answers import Database
from jetdbt.projections.graph import queries
from jetdbt.projections.graph.queries import PRODUCING, WRITES_SHOWN, GraphKey
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.keys import POOL
from jetdbt.shared.blobs.digests import digest_of

__all__ = ["routes", "NODES_PER_PAGE", "RELATION_ROWS"]

routes = web.RouteTableDef()

NODES_PER_PAGE = 10_000  # the default and the most a graph page holds
RELATION_ROWS = 1000  # nodes, and readers, of one relation
# Compressed graph pages kept in memory, the least recently served dropped first.
CACHED_BYTES = 64 * 1024 * 1024


class _Nodes(NamedTuple):
    """A page of a graph's nodes: ids after `after`, at most `limit` of them."""

    after: str | None
    limit: int


def _nodes_page(request: web.Request) -> _Nodes:
    limit = min(query(request, "limit", NODES_PER_PAGE), NODES_PER_PAGE)
    return _Nodes(query(request, "after"), limit)


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


# Each app's pages: a process may serve several apps, each reading its own database.
_cached: weakref.WeakKeyDictionary[web.Application, _Pages] = weakref.WeakKeyDictionary()


def _etag(
    key: GraphKey, graph_digest: str, checkpoints: list[int], want: _Nodes, served_as: tuple
) -> str:
    """Weak: the same page may go out compressed or not. The graph's key is in it: two
    versions (or two projects) whose graphs are the same bytes are two pages, each saying
    its own project, version and deployer."""
    tag = msgspec.json.encode([*key, graph_digest, checkpoints, want.after, want.limit, *served_as])
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


_encoder = msgspec.json.Encoder()


async def _page(
    request: web.Request, conn: Database, key: GraphKey, extra: dict
) -> web.Response | None:
    """The requested page of graph `key` with the fields in `extra`: a 304 when the caller
    holds it, else from the app's pages or read once into them. None when there is no such
    graph. Call it inside one repeatable-read transaction, so the checkpoint in the ETag is
    the state the page was read in."""
    state = await queries.graph_state(conn, *key)
    if state is None:
        return None
    want = _nodes_page(request)
    etag = _etag(key, state.digest, state.checkpoints, want, sorted(extra.items()))
    if _not_modified(request, etag):
        return web.Response(status=304, headers={hdrs.ETAG: etag})
    pages = _cached.setdefault(request.app, _Pages())
    page = pages.get(etag)
    if page is None:
        graph = await queries.graph_page(conn, *key, want.after, want.limit)
        if graph is None:
            return None
        encoded = _encoder.encode(msgspec.structs.replace(graph, **extra))
        # MBs, so not on the loop; level 1: a fifth larger than level 5, in half the time.
        page = await asyncio.to_thread(gzip.compress, encoded, 1)
        pages.put(etag, page)
    return _page_response(request, etag, page)


async def _relation_problem(
    db: Database,
    request: web.Request,
    key: str,
    nodes: list[schemas.RelationNode],
    readers: list[schemas.Reader],
) -> web.Response | None:
    """A 403 unless the token may read a project that writes or reads the relation (an
    admin may read every relation, one only other systems declared writes on too)."""
    token = auth.token_of(request)
    if token.role == "admin":
        return None
    projects = sorted({r.project for r in [*nodes, *readers]})
    for project in projects:
        if await auth.scope_problem(db, token, project) is None:
            return None
    # Never which projects they are: another team's project names are not the token's to read.
    return error(
        403, f"relation {key!r} is written or read by no project token {token.id} may read"
    )


@routes.get("/v1/projects/{project}/graph")
async def project_graph(request: web.Request) -> web.Response:
    project = path(request, "project")
    version = query(request, "version")
    async with request.app[POOL].acquire() as conn, conn.transaction(isolation="repeatable_read"):
        key = await queries.deployed_graph(conn, project, version or "")
        answer = None if key is None else await _page(request, conn, key, {})
    if answer is None:
        which = f"version {version!r}" if version else "any deployed version"
        return error(404, f"project {project!r} has no graph for {which}")
    return answer


@routes.get("/v1/runs/{run_id}/graph")
async def run_graph(request: web.Request) -> web.Response:
    run_id = path(request, "run_id")
    async with request.app[POOL].acquire() as conn, conn.transaction(isolation="repeatable_read"):
        key = await queries.run_graph_key(conn, run_id)
        answer = None
        if key is not None:
            # A run the progress fold has not folded yet had no project to check the token's
            # scope against before this route: the graph's own project is checked here.
            refused = await auth.project_problem(request, key.project)
            if refused is not None:
                return refused
            # A fallback is its version's graph, stored under no run.
            extra = {"run_id": run_id, "fallback": key.run_id != run_id}
            answer = await _page(request, conn, key, extra)
    if answer is None:
        return error(404, f"run {run_id!r} has no graph (yet)")
    return answer


@routes.get("/v1/relations/{key:.+}")
async def relation(request: web.Request) -> web.Response:
    """Who produces and who reads one relation, what its producers read (upstream), who
    wrote it; each list capped, `truncated` names the lists that were cut."""
    key = path(request, "key")
    db = request.app[POOL]
    nodes = await queries.relation_nodes(db, key, RELATION_ROWS + 1)
    nodes, cut_nodes = nodes[:RELATION_ROWS], len(nodes) > RELATION_ROWS
    readers = await queries.relation_readers(
        db,
        [n.project for n in nodes],
        [n.version for n in nodes],
        [n.unique_id for n in nodes],
        RELATION_ROWS + 1,
    )
    # Who writes or reads it is who may read it: nothing else is read before the token is.
    refused = await _relation_problem(db, request, key, nodes, readers)
    if refused is not None:
        return refused
    writes = await queries.relation_writes(db, key, WRITES_SHOWN)
    declared = (await queries.declared_writes(db, [key])).get(key, [])
    if not nodes and not writes and not declared:
        return error(
            404,
            f"relation {key!r} is not known: no deployed project's graph has it and no"
            " system declared a write of it",
        )
    producing = [n for n in nodes if n.resource_type in PRODUCING and n.owned]
    upstream = await queries.relation_upstream(
        db,
        [n.project for n in producing],
        [n.version for n in producing],
        [n.unique_id for n in producing],
        RELATION_ROWS + 1,
    )
    runs = await queries.relation_runs(
        db, [n.project for n in producing], [n.unique_id for n in producing], WRITES_SHOWN
    )
    producers = [
        schemas.DbtProducer(project=n.project, unique_id=n.unique_id) for n in producing
    ] + [schemas.DeclaredProducer(producer=w.producer, last_write=w) for w in declared]
    cut = {
        "nodes": cut_nodes,
        "readers": len(readers) > RELATION_ROWS,
        "upstream": len(upstream) > RELATION_ROWS,
    }
    return respond(
        schemas.Relation(
            relation=key,
            nodes=nodes,
            producers=producers,
            readers=readers[:RELATION_ROWS],
            upstream=upstream[:RELATION_ROWS],
            writes=writes,
            runs=runs,
            truncated=[name for name, was in cut.items() if was],
        )
    )

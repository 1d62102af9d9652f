"""`GET /v1/runs/{run_id}/nodes/{unique_id}`: what a run recorded of one node beyond its row
in the run (the SQL dbt compiled for it), and the node's history: its outcome and duration
in its project's latest runs, newest first. The viewer's node panel reads it on a click, so
a run's own answer stays small however long its nodes' SQL is.

`GET /v1/projects/{project}/nodes/{unique_id}/history`: the same history without a run, for
the viewer's page of a model across runs (reached from a relation or the lineage)."""

from __future__ import annotations

from aiohttp import web
from jetdbt.projections.progress import queries
from jetdbt.services.api import schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.keys import POOL

__all__ = ["routes", "HISTORY_RUNS"]

HISTORY_RUNS = (20, 100)  # runs in a node's history: default, maximum

routes = web.RouteTableDef()


def _limit(request: web.Request) -> int:
    return min(query(request, "limit", HISTORY_RUNS[0]), HISTORY_RUNS[1])


@routes.get("/v1/runs/{run_id}/nodes/{unique_id}")
async def run_node(request: web.Request) -> web.Response:
    run_id, unique_id = path(request, "run_id"), path(request, "unique_id")
    async with request.app[POOL].acquire() as conn:
        detail = await queries.run_node(conn, run_id, unique_id, _limit(request))
    if detail is None:
        return error(404, f"run {run_id!r} not found")
    return respond(detail)


@routes.get("/v1/projects/{project}/nodes/{unique_id}/history")
async def node_history(request: web.Request) -> web.Response:
    project, unique_id = path(request, "project"), path(request, "unique_id")
    history = await queries.node_history(request.app[POOL], project, unique_id, _limit(request))
    body = {"project": project, "unique_id": unique_id, "history": history}
    return respond(schemas.shaped(schemas.NodeHistories, body))

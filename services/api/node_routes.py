"""`GET /v1/runs/{run_id}/nodes/{unique_id}`: what a run recorded of one node beyond its row
in the run (the SQL dbt compiled for it), and the node's history: its outcome and duration
in its project's latest runs, newest first. The viewer's node panel reads it on a click, so
a run's own answer stays small however long its nodes' SQL is.

`GET /v1/projects/{project}/nodes/{unique_id}/history`: the same history without a run, for
the viewer's page of a model across runs (reached from a relation or the lineage)."""

from __future__ import annotations

import asyncpg
from aiohttp import web
from jetdbt.services.api import schemas
from jetdbt.services.api.boundary import error, path, query, respond

__all__ = ["add_node_routes", "HISTORY_RUNS"]

HISTORY_RUNS = (20, 100)  # runs in a node's history: default, maximum

_NODE = "SELECT compiled_code, thread FROM run_nodes WHERE run_id = $1 AND unique_id = $2"
# Runs hidden from listings (a CI check's) are left out of a node's history too.
_HISTORY = (
    "SELECT n.run_id, r.status AS run_status, r.command->>'label' AS command, n.status,"
    " n.outcome, n.execution_time,"
    " n.started_at, n.finished_at, r.requested_at FROM run_nodes n JOIN runs r USING (run_id)"
    " WHERE n.unique_id = $2 AND r.project = $1 AND NOT r.hidden"
    " ORDER BY r.requested_at DESC NULLS LAST, n.run_id LIMIT $3"
)


def _limit(request: web.Request) -> int:
    return min(query(request, "limit", HISTORY_RUNS[0]), HISTORY_RUNS[1])


def add_node_routes(app: web.Application, pool: asyncpg.Pool) -> None:
    async def run_node(request: web.Request) -> web.Response:
        run_id, unique_id = path(request, "run_id"), path(request, "unique_id")
        async with pool.acquire() as conn:
            project = await conn.fetchval("SELECT project FROM runs WHERE run_id = $1", run_id)
            if project is None:
                return error(404, f"run {run_id!r} not found")
            node = await conn.fetchrow(_NODE, run_id, unique_id)
            history = await conn.fetch(_HISTORY, project, unique_id, _limit(request))
        body = {
            "run_id": run_id,
            "project": project,
            "unique_id": unique_id,
            "in_run": node is not None,
            "compiled_code": node["compiled_code"] if node else None,
            "thread": node["thread"] if node else None,
            "history": [dict(r) for r in history],
        }
        return respond(schemas.shaped(schemas.RunNodeDetail, body))

    async def node_history(request: web.Request) -> web.Response:
        project, unique_id = path(request, "project"), path(request, "unique_id")
        async with pool.acquire() as conn:
            history = await conn.fetch(_HISTORY, project, unique_id, _limit(request))
        body = {"project": project, "unique_id": unique_id, "history": [dict(r) for r in history]}
        return respond(schemas.shaped(schemas.NodeHistories, body))

    app.router.add_get("/v1/runs/{run_id}/nodes/{unique_id}", run_node)
    app.router.add_get("/v1/projects/{project}/nodes/{unique_id}/history", node_history)

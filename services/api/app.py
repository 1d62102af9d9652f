"""The query API: reads projections, never executes anything.

Commands a caller POSTs here go onto `dbt.cmd.>` exactly as another system
would publish them; everything else is a read of the projection tables.
"""

from __future__ import annotations

import uuid

import asyncpg
import msgspec
from aiohttp import web

from projections.progress_tables import COUNT_COLUMNS, NODE_COLUMNS, RUN_COLUMNS, without_nodes
from services.api.graph_routes import add_graph_routes
from services.api.ops_routes import add_ops_routes
from shared import commands, subjects
from shared.bus import Bus

__all__ = ["create_app", "POOL", "BUS"]

POOL = web.AppKey("pool", asyncpg.Pool)
BUS = web.AppKey("bus", Bus)

_encoder = msgspec.json.Encoder()


def _json(data, status: int = 200) -> web.Response:
    return web.Response(body=_encoder.encode(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


# A run as listed: its columns without the stored result, with the node counts.
_RUN = ", ".join([c for c in RUN_COLUMNS if c != "result"] + list(COUNT_COLUMNS))
_NODE = ", ".join(c for c in NODE_COLUMNS if c != "run_id")


async def healthz(request: web.Request) -> web.Response:
    async with request.app[POOL].acquire() as conn:
        await conn.fetchval("SELECT 1")
    return _json({"ok": True, "nats": request.app[BUS].nc.is_connected})


async def get_run(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    async with request.app[POOL].acquire() as conn:
        run = await conn.fetchrow(f"SELECT {_RUN}, result FROM runs WHERE run_id = $1", run_id)
        if run is None:
            return _error(404, f"run {run_id!r} not found")
        nodes = await conn.fetch(
            f"SELECT {_NODE} FROM run_nodes WHERE run_id = $1"
            " ORDER BY started_at NULLS LAST, unique_id",
            run_id,
        )
    body = dict(run)
    # The progress fold stores results without their nodes; rows folded before it did
    # still carry them until a `replay --swap`. The nodes are the run_nodes rows either way.
    result = body.pop("result") or {}
    body["result"] = without_nodes(result) or None
    body["nodes"] = [dict(n) for n in nodes]
    return _json(body)


async def list_runs(request: web.Request) -> web.Response:
    try:
        limit = min(int(request.query.get("limit", "50")), 500)
    except ValueError:
        return _error(400, "limit must be a whole number")
    return await _project_rows(
        request,
        "runs",
        f"SELECT {_RUN} FROM runs WHERE project = $1"
        " ORDER BY requested_at DESC NULLS LAST LIMIT $2",
        limit,
    )


async def _project_rows(request: web.Request, key: str, sql: str, *args) -> web.Response:
    """One project's rows of a projection, under `key`; `sql` takes the project as $1."""
    project = request.match_info["project"]
    async with request.app[POOL].acquire() as conn:
        rows = await conn.fetch(sql, project, *args)
    return _json({"project": project, key: [dict(r) for r in rows]})


async def list_deploys(request: web.Request) -> web.Response:
    return await _project_rows(
        request,
        "deploys",
        "SELECT deploy_id, status, version, manifest_digest, engine, engine_version, adapter,"
        " adapter_version, skipped, reason, requested_by, at FROM deploys"
        " WHERE project = $1 ORDER BY at DESC LIMIT 100",
    )


async def retry_state(request: web.Request) -> web.Response:
    """Per principal, which run a retry would resume."""
    return await _project_rows(
        request,
        "retry_state",
        "SELECT principal, run_id, attempt, version, command, args, saved_at"
        " FROM retry_state WHERE project = $1 ORDER BY principal",
    )


async def environments(request: web.Request) -> web.Response:
    """Each environment's published state: which run published it, and when."""
    return await _project_rows(
        request,
        "environments",
        "SELECT warehouse, target, schema_name AS schema, database_name AS database, run_id,"
        " version, manifest_digest, run_results_digest IS NOT NULL AS has_run_results,"
        " published_at FROM environments WHERE project = $1 ORDER BY warehouse, target",
    )


async def post_run(request: web.Request) -> web.Response:
    """Publish a run command; 202 with the run id to follow."""
    project = request.match_info["project"]
    try:
        subjects.check_project(project)
        raw = await request.read()
        body = commands.decode_run(raw)
    except (subjects.InvalidName, commands.CommandRejected) as exc:
        return _error(400, str(exc))
    run_id = body.run_id or uuid.uuid4().hex
    cmd = msgspec.structs.replace(body, run_id=run_id)
    await request.app[BUS].publish_command("run", project, cmd, run_id)
    return _json({"run_id": run_id, "project": project}, status=202)


def create_app(pool: asyncpg.Pool, bus: Bus) -> web.Application:
    app = web.Application()
    app[POOL] = pool
    app[BUS] = bus
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/v1/runs/{run_id}", get_run)
    app.router.add_get("/v1/projects/{project}/runs", list_runs)
    app.router.add_post("/v1/projects/{project}/runs", post_run)
    app.router.add_get("/v1/projects/{project}/retry-state", retry_state)
    app.router.add_get("/v1/projects/{project}/environments", environments)
    app.router.add_get("/v1/projects/{project}/deploys", list_deploys)
    add_graph_routes(app, pool)
    add_ops_routes(app, pool, bus)
    return app

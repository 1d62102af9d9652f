"""`GET /v1/runs/{run_id}/artifacts/{name}`: dbt's manifest.json or run_results.json of a
run, byte for byte as dbt wrote them in the run's last invocation (masked, like every byte a
runner stores), for the tools that read dbt Cloud's artifacts API. Served while retention
keeps the run's files; after, a 404 that names retention (the run's record stays)."""

from __future__ import annotations

import asyncpg
from aiohttp import web
from jetdbt.services.api.boundary import error, path
from jetdbt.shared.bus.connection import Bus

__all__ = ["add_artifact_routes"]

_READ = (
    "SELECT artifacts ->> $2 AS digest, finished_at, files_pruned_at FROM runs WHERE run_id = $1"
)


def _pruned(run_id: str, name: str, at) -> web.Response:
    when = f" at {at.isoformat()}" if at is not None else ""
    return error(
        404,
        f"run {run_id!r}'s {name} was removed by retention{when}: RUN_RETENTION keeps the"
        " files of an environment's newest runs; its status, result and nodes remain",
    )


def add_artifact_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus) -> None:
    async def artifact(request: web.Request) -> web.Response:
        run_id, name = path(request, "run_id"), path(request, "name")
        async with pool.acquire() as conn:
            run = await conn.fetchrow(_READ, run_id, name)
        if run is None:
            return error(404, f"run {run_id!r} not found")
        if run["files_pruned_at"] is not None:
            return _pruned(run_id, name, run["files_pruned_at"])
        if run["digest"] is None:
            why = "it has not ended" if run["finished_at"] is None else "dbt wrote none"
            return error(404, f"run {run_id!r} kept no {name}: {why}")
        try:
            data = await bus.get_blob(run["digest"])
        except Exception:  # noqa: BLE001 - removed before the projection heard of it
            return _pruned(run_id, name, None)
        return web.Response(body=data, content_type="application/json")

    app.router.add_get("/v1/runs/{run_id}/artifacts/{name}", artifact)

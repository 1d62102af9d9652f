"""`GET /v1/runs/{run_id}/artifacts/{name}`: dbt's manifest.json or run_results.json of a
run, byte for byte as dbt wrote them in the run's last invocation (masked, like every byte a
runner stores), for the tools that read dbt Cloud's artifacts API. Served while retention
keeps the run's files; after, a 404 that names retention (the run's record stays)."""

from __future__ import annotations

from datetime import datetime

from aiohttp import web
from jetdbt.projections.progress import queries
from jetdbt.services.api.boundary import error, path
from jetdbt.services.api.keys import BUS, POOL

__all__ = ["routes"]

routes = web.RouteTableDef()


def _pruned(run_id: str, name: str, at: datetime | None) -> web.Response:
    when = f" at {at.isoformat()}" if at is not None else ""
    return error(
        404,
        f"run {run_id!r}'s {name} was removed by retention{when}: RUN_RETENTION keeps the"
        " files of an environment's newest runs; its status, result and nodes remain",
    )


@routes.get("/v1/runs/{run_id}/artifacts/{name}")
async def artifact(request: web.Request) -> web.Response:
    run_id, name = path(request, "run_id"), path(request, "name")
    run = await queries.run_summary(request.app[POOL], run_id)
    if run is None:
        return error(404, f"run {run_id!r} not found")
    if run.files_pruned_at is not None:
        return _pruned(run_id, name, run.files_pruned_at)
    digest = (run.artifacts or {}).get(name)
    if digest is None:
        why = "it has not ended" if run.finished_at is None else "dbt wrote none"
        return error(404, f"run {run_id!r} kept no {name}: {why}")
    try:
        data = await request.app[BUS].get_blob(digest)
    except Exception:  # noqa: BLE001 - removed before the projection heard of it
        return _pruned(run_id, name, None)
    return web.Response(body=data, content_type="application/json")

"""A run and a project's runs as the progress projection has them, and a run's command, which
the API publishes onto `dbt.cmd.run.<project>.<principal>` as the token's principal."""

from __future__ import annotations

import uuid

import msgspec
from aiohttp import web
from jetdbt.projections.answers import Database
from jetdbt.projections.progress import queries
from jetdbt.services.api import auth, schemas, warehouse_door
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.keys import BUS, POOL
from jetdbt.services.api.pages import project_page
from jetdbt.shared.bus import commands

__all__ = ["routes", "RUNS_PAGE"]

RUNS_PAGE = (50, 500)  # rows per page: default, maximum

routes = web.RouteTableDef()


@routes.get("/v1/runs/{run_id}")
async def get_run(request: web.Request) -> web.Response:
    run_id = path(request, "run_id")
    async with request.app[POOL].acquire() as conn:
        run = await queries.run(conn, run_id)
    if run is None:
        return error(404, f"run {run_id!r} not found")
    return respond(run)


@routes.get("/v1/projects/{project}/runs")
async def list_runs(request: web.Request) -> web.Response:
    """`?environment=NAME` keeps the runs of one environment, `?job=NAME` those of one job."""
    environment, job = query(request, "environment", ""), query(request, "job", "")

    def read(db: Database, project: str, limit: int, offset: int):
        return queries.runs(db, project, limit, offset, environment=environment, job=job)

    return await project_page(request, "runs", RUNS_PAGE, read, schemas.Runs)


@routes.post("/v1/projects/{project}/runs")
async def post_run(request: web.Request) -> web.Response:
    """Publish a run command as the token's principal; 202 with the run id to follow."""
    project = path(request, "project")
    try:
        body = commands.decode_run(await request.read())
    except commands.CommandRejected as exc:
        return error(400, str(exc))
    refused = await warehouse_door.refusal(request, project)
    if refused is not None:
        return refused
    token = auth.token_of(request)
    run_id = body.run_id or uuid.uuid4().hex
    cmd = msgspec.structs.replace(body, run_id=run_id, requested_by=token.principal)
    await request.app[BUS].publish_command(
        "run", project, cmd, run_id, principal=token.principal, token_id=token.id
    )
    return respond(schemas.RunAccepted(run_id=run_id, project=project), status=202)

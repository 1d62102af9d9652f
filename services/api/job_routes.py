"""Saved jobs: list them, publish job commands, run one now.

Like every command, a job command goes onto `dbt.cmd.job.<project>.<principal>` as the
token's principal; a runner checks it again and records the job's facts, which the jobs
projection folds into what GET answers.
"""

from __future__ import annotations

import uuid

from aiohttp import web
from jetdbt.projections.jobs import queries
from jetdbt.services.api import auth, schemas, warehouse_door
from jetdbt.services.api.boundary import error, path, respond
from jetdbt.services.api.keys import BUS, SETTINGS
from jetdbt.services.api.pages import project_page
from jetdbt.shared.bus import commands
from jetdbt.shared.jobs.schedule_interval import interval_problem

__all__ = ["routes", "JOBS_PAGE"]

JOBS_PAGE = (100, 500)

routes = web.RouteTableDef()


@routes.get("/v1/projects/{project}/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    return await project_page(request, "jobs", JOBS_PAGE, queries.jobs, schemas.Jobs)


@routes.post("/v1/projects/{project}/jobs")
async def post_job(request: web.Request) -> web.Response:
    project = path(request, "project")
    try:
        body = commands.decode_job(await request.read())
    except commands.CommandRejected as exc:
        return error(400, str(exc))
    # SCHEDULE_MIN_INTERVAL_SECONDS, checked before a schedule is sent.
    least = request.app[SETTINGS].schedule_min_interval_seconds
    if body.action == "schedule" and (refused := interval_problem(body.cron, least)):
        return error(400, refused)
    token = auth.token_of(request)
    await request.app[BUS].publish_command(
        "job", project, body, uuid.uuid4().hex, principal=token.principal, token_id=token.id
    )
    accepted = schemas.JobAccepted(project=project, name=body.name, action=body.action)
    return respond(accepted, status=202)


@routes.post("/v1/projects/{project}/jobs/{job}/runs")
async def run_job(request: web.Request) -> web.Response:
    project, job = path(request, "project"), path(request, "job")
    refused = await warehouse_door.refusal(request, project)
    if refused is not None:
        return refused
    token = auth.token_of(request)
    run_id = uuid.uuid4().hex
    cmd = commands.RunCommand(
        command=commands.JobRun(name=job), run_id=run_id, requested_by=token.principal
    )
    await request.app[BUS].publish_command(
        "run", project, cmd, run_id, principal=token.principal, token_id=token.id
    )
    return respond(schemas.RunAccepted(run_id=run_id, project=project), status=202)

"""Saved jobs: list them, publish job commands, run one now.

Like every command, a job command goes onto `dbt.cmd.job.<project>.<principal>` as the
token's principal; a runner checks it again and records the job's facts, which the jobs
projection folds into what GET answers.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
from aiohttp import web
from jetdbt.services.api import auth, schemas, warehouse_door
from jetdbt.services.api.boundary import error, page, path, respond
from jetdbt.shared.bus import commands
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.jobs.schedule_interval import interval_problem
from jetdbt.shared.jobs.schedule_next import next_fire

__all__ = ["add_job_routes", "JOBS_PAGE"]

JOBS_PAGE = (100, 500)
_SCHEDULE = ("state", "cron", "tz", "principal", "saved_at", "fires", "coalesced",
             "last_fired_at", "last_run_id", "next_at")  # fmt: skip


def _schedule(row, now: datetime) -> dict:
    """A job's schedule as its row says, its next fire told from its cron while it is active
    and the server has not said one still to come (before its first fire)."""
    schedule = {c: row[f"s_{c}"] for c in _SCHEDULE}
    told = schedule["next_at"]
    if schedule["state"] == "active" and (told is None or told <= now):
        since = schedule["saved_at"]
        schedule["next_at"] = next_fire(schedule["cron"], schedule["tz"], now, since)
    return schedule


def add_job_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus, *, least: int) -> None:
    """`least`: SCHEDULE_MIN_INTERVAL_SECONDS, checked before a schedule is sent."""

    async def list_jobs(request: web.Request) -> web.Response:
        project = path(request, "project")
        want = page(request, *JOBS_PAGE)
        async with pool.acquire() as conn:
            fetched = await conn.fetch(
                "SELECT j.name, j.spec, j.saved_by, j.saved_at, s.state IS NOT NULL AS scheduled,"
                + ", ".join(f" s.{c} AS s_{c}" for c in _SCHEDULE)
                + " FROM jobs j LEFT JOIN job_schedules s ON s.project = j.project"
                " AND s.job = j.name AND s.state <> 'removed' WHERE j.project = $1"
                " ORDER BY j.name LIMIT $2 OFFSET $3",
                project,
                want.limit + 1,
                want.offset,
            )
        rows, after = want.rows(fetched)
        now = datetime.now(UTC)
        jobs = [
            {
                "name": r["name"],
                "spec": r["spec"],
                "saved_by": r["saved_by"],
                "saved_at": r["saved_at"],
                "schedule": _schedule(r, now) if r["scheduled"] else None,
            }
            for r in rows
        ]
        body = {"project": project, "jobs": jobs, "next": after}
        return respond(schemas.shaped(schemas.Jobs, body))

    async def post_job(request: web.Request) -> web.Response:
        project = path(request, "project")
        try:
            body = commands.decode_job(await request.read())
        except commands.CommandRejected as exc:
            return error(400, str(exc))
        if body.action == "schedule" and (refused := interval_problem(body.cron, least)):
            return error(400, refused)
        token = auth.token_of(request)
        await bus.publish_command(
            "job", project, body, uuid.uuid4().hex, principal=token.principal, token_id=token.id
        )
        accepted = schemas.JobAccepted(project=project, name=body.name, action=body.action)
        return respond(accepted, status=202)

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
        await bus.publish_command(
            "run", project, cmd, run_id, principal=token.principal, token_id=token.id
        )
        return respond(schemas.RunAccepted(run_id=run_id, project=project), status=202)

    app.router.add_get("/v1/projects/{project}/jobs", list_jobs)
    app.router.add_post("/v1/projects/{project}/jobs", post_job)
    app.router.add_post("/v1/projects/{project}/jobs/{job}/runs", run_job)

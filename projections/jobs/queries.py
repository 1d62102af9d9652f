"""The jobs projection's reads: a project's saved jobs with their schedules, as the API lists
them (a schedule's next fire told from its cron until the server has said one)."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.jobs.answers import Job
from jetdbt.shared.jobs.schedule_next import next_fire

__all__ = ["jobs", "fires_coalesced"]

_SCHEDULE = ("state", "cron", "tz", "principal", "saved_at", "fires", "coalesced",
             "last_fired_at", "last_run_id", "next_at")  # fmt: skip
# A removed schedule is no schedule: the job lists with none.
_JOBS = (
    "SELECT j.name, j.spec, j.saved_by, j.saved_at, s.state IS NOT NULL AS scheduled,"
    + ", ".join(f" s.{c} AS s_{c}" for c in _SCHEDULE)
    + " FROM jobs j LEFT JOIN job_schedules s ON s.project = j.project"
    " AND s.job = j.name AND s.state <> 'removed' WHERE j.project = $1"
    " ORDER BY j.name LIMIT $2 OFFSET $3"
)


def _schedule(row: asyncpg.Record, now: datetime) -> dict:
    """A job's schedule as its row says, its next fire told from its cron while it is active
    and the server has not said one still to come (before its first fire)."""
    schedule = {c: row[f"s_{c}"] for c in _SCHEDULE}
    told = schedule["next_at"]
    if schedule["state"] == "active" and (told is None or told <= now):
        since = schedule["saved_at"]
        schedule["next_at"] = next_fire(schedule["cron"], schedule["tz"], now, since)
    return schedule


async def jobs(db: Database, project: str, limit: int, offset: int) -> list[Job]:
    """A page of the project's jobs, by name."""
    fetched = await db.fetch(_JOBS, project, limit, offset)
    now = datetime.now(UTC)
    return [
        shaped(
            Job,
            {
                "name": r["name"],
                "spec": r["spec"],
                "saved_by": r["saved_by"],
                "saved_at": r["saved_at"],
                "schedule": _schedule(r, now) if r["scheduled"] else None,
            },
        )
        for r in fetched
    ]


async def fires_coalesced(db: Database) -> int:
    """Schedule fires that joined their previous fire's run instead of queueing another."""
    return await db.fetchval("SELECT coalesce(sum(coalesced), 0) FROM job_schedules")

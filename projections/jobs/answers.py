"""What the jobs projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jetdbt.projections.answers import Answer, NextOffset


class JobSchedule(Answer):
    """A job's schedule: active, paused or removed; how often the server fired it, how many
    of those fires joined the run of the previous fire (still queued or running) instead of
    queueing another, the run it started last, and when it fires next (from the server's own
    fire, else told from its cron, from the moment it is active)."""

    state: str
    cron: str
    tz: str
    principal: str
    saved_at: datetime
    fires: int
    coalesced: int
    last_fired_at: datetime | None
    last_run_id: str | None
    next_at: datetime | None


class Job(Answer):
    """A saved job: its spec (jetdbt.shared.bus.commands.JobSpec) and its schedule, if it has
    one."""

    name: str
    spec: dict[str, Any]
    saved_by: str
    saved_at: datetime
    schedule: JobSchedule | None


class Jobs(Answer):
    project: str
    jobs: list[Job]
    next: NextOffset | None

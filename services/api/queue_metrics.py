"""Queueing in `/metrics`: how many runs wait and run now, how long the oldest has waited,
overall and per team (one team's burst shows as its own), the waits of runs that started
(a histogram: its sum and count give the mean over any window, its buckets how many waited
longer than a bound), and the schedule fires that joined their previous fire's run instead
of queueing another. Read from the progress and jobs projections, like every answer of the
API."""

from __future__ import annotations

from jetdbt.projections.answers import Database
from jetdbt.projections.jobs import queries as job_queries
from jetdbt.projections.progress import queries
from jetdbt.services.api.run_metrics import histogram, label

__all__ = ["queue_metrics", "WAIT_BUCKETS"]

WAIT_BUCKETS = (0.1, 1, 5, 15, 60, 300, 900, 3600)  # seconds; +Inf is added

_TEAM_GAUGES = (
    ("queued", "jetdbt_team_runs_queued", "Runs of a team waiting to start."),
    ("oldest", "jetdbt_team_run_queue_oldest_seconds", "How long a team's oldest queued run"
     " has waited."),
)  # fmt: skip
_GAUGES = (
    ("queued", "jetdbt_runs_queued", "Runs waiting to start, holding no slot."),
    ("running", "jetdbt_runs_running", "Runs building now."),
    ("oldest", "jetdbt_run_queue_oldest_seconds", "How long the oldest queued run has waited."),
)
_WAIT = "jetdbt_run_queue_wait_seconds"


async def queue_metrics(db: Database) -> str:
    """The queue's lines of the Prometheus text format."""
    now = await queries.queue(db)
    lines = []
    for field, metric, help_text in _GAUGES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines.append(f"{metric} {float(getattr(now, field)):g}")
    teams = await queries.team_queues(db)
    for field, metric, help_text in _TEAM_GAUGES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [f'{metric}{{team="{label(t.team)}"}} {float(getattr(t, field)):g}' for t in teams]
    coalesced = "jetdbt_schedule_fires_coalesced_total"
    lines += [
        f"# HELP {coalesced} Schedule fires that joined their previous fire's run, still"
        " queued or running, instead of queueing another.",
        f"# TYPE {coalesced} counter",
        f"{coalesced} {await job_queries.fires_coalesced(db)}",
    ]
    lines += histogram(
        _WAIT,
        "How long runs that started had waited in the queue.",
        await queries.queue_waits(db, WAIT_BUCKETS),
        WAIT_BUCKETS,
    )
    return "\n".join(lines) + "\n"

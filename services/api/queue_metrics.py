"""Queueing in `/metrics`: how many runs wait and run now, how long the oldest has waited,
overall and per team (one team's burst shows as its own), the waits of runs that started
(a histogram: its sum and count give the mean over any window, its buckets how many waited
longer than a bound), and the schedule fires that joined their previous fire's run instead
of queueing another. Read from the progress and jobs projections, like every answer of the
API."""

from __future__ import annotations

from jetdbt.services.api.run_metrics import histogram, histogram_sql, label
from jetdbt.shared.runs.run_status import QUEUED, RUNNING

__all__ = ["queue_metrics", "WAIT_BUCKETS"]

WAIT_BUCKETS = (0.1, 1, 5, 15, 60, 300, 900, 3600)  # seconds; +Inf is added

_READ = (
    f"SELECT count(*) FILTER (WHERE status = '{QUEUED}') AS queued,"
    f" count(*) FILTER (WHERE status = '{RUNNING}') AS running,"
    f" coalesce(max(extract(epoch FROM now() - queued_at)) FILTER (WHERE status = '{QUEUED}'), 0)"
    " AS oldest FROM runs"
)
_BY_TEAM = (
    "SELECT coalesce(team, '') AS team, count(*) AS queued,"
    " extract(epoch FROM now() - min(queued_at)) AS oldest"
    f" FROM runs WHERE status = '{QUEUED}' GROUP BY 1 ORDER BY 1"
)
_TEAM_GAUGES = (
    ("queued", "jetdbt_team_runs_queued", "Runs of a team waiting to start."),
    ("oldest", "jetdbt_team_run_queue_oldest_seconds", "How long a team's oldest queued run"
     " has waited."),
)  # fmt: skip
_COALESCED = "SELECT coalesce(sum(coalesced), 0) AS n FROM job_schedules"
_WAITS = histogram_sql("queued_seconds", "runs", "queued_seconds IS NOT NULL", WAIT_BUCKETS)
_GAUGES = (
    ("queued", "jetdbt_runs_queued", "Runs waiting to start, holding no slot."),
    ("running", "jetdbt_runs_running", "Runs building now."),
    ("oldest", "jetdbt_run_queue_oldest_seconds", "How long the oldest queued run has waited."),
)
_WAIT = "jetdbt_run_queue_wait_seconds"


async def queue_metrics(conn) -> str:
    """The queue's lines of the Prometheus text format."""
    row = await conn.fetchrow(_READ)
    lines = []
    for column, metric, help_text in _GAUGES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines.append(f"{metric} {float(row[column]):g}")
    teams = await conn.fetch(_BY_TEAM)
    for column, metric, help_text in _TEAM_GAUGES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [f'{metric}{{team="{label(r["team"])}"}} {float(r[column] or 0):g}' for r in teams]
    coalesced = "jetdbt_schedule_fires_coalesced_total"
    lines += [
        f"# HELP {coalesced} Schedule fires that joined their previous fire's run, still"
        " queued or running, instead of queueing another.",
        f"# TYPE {coalesced} counter",
        f"{coalesced} {await conn.fetchval(_COALESCED)}",
    ]
    lines += histogram(
        _WAIT,
        "How long runs that started had waited in the queue.",
        await conn.fetchrow(_WAITS),
        WAIT_BUCKETS,
    )
    return "\n".join(lines) + "\n"

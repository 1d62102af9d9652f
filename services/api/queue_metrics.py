"""Queueing in `/metrics`: how many runs wait and run now, how long the oldest has waited,
and the waits of runs that started (a sum and a count, so a scraper takes the mean over
any window). Read from the progress projection's `runs`, like every answer of the API."""

from __future__ import annotations

__all__ = ["queue_metrics"]

_READ = (
    "SELECT count(*) FILTER (WHERE status = 'queued') AS queued,"
    " count(*) FILTER (WHERE status = 'running') AS running,"
    " coalesce(max(extract(epoch FROM now() - queued_at)) FILTER (WHERE status = 'queued'), 0)"
    " AS oldest,"
    " count(queued_seconds) AS waits, coalesce(sum(queued_seconds), 0) AS waited FROM runs"
)
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
    lines += [
        f"# HELP {_WAIT} How long runs that started had waited in the queue.",
        f"# TYPE {_WAIT} summary",
        f"{_WAIT}_sum {float(row['waited']):g}",
        f"{_WAIT}_count {row['waits']}",
    ]
    return "\n".join(lines) + "\n"

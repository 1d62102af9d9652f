"""A run's status words, in one place: what the runs table, the API, the CLI and the hooks
say a run is now.

A run is `requested` until a runner takes it, `queued` while it waits for a slot, `running`
while dbt runs, and ends `passed`, `failed` or `cancelled` (its RunResult's status) or
`refused` (it never ran). A node's outcome (shared/runs/outcomes.py) is another vocabulary that
shares two of these words.
"""

from __future__ import annotations

from jetdbt.shared.bus import events as ev

__all__ = [
    "REQUESTED",
    "QUEUED",
    "RUNNING",
    "PASSED",
    "FAILED",
    "CANCELLED",
    "REFUSED",
    "RESULTS",
    "ended_as",
]

REQUESTED = "requested"
QUEUED = "queued"
RUNNING = "running"
PASSED = "passed"
FAILED = "failed"
CANCELLED = "cancelled"
REFUSED = "refused"
# What a run that ran ends as: a RunResult's status.
RESULTS = (PASSED, FAILED, CANCELLED)


def ended_as(end: ev.Event) -> str:
    """The status a run's final event (one of events.RUN_ENDS) leaves it in."""
    return end.result.status if isinstance(end, ev.RunFinished) else REFUSED

"""dbt's own status words mapped onto jetdbt's stable outcomes, in one place, and which
of a node's outcomes in a run stands.

`status` is dbt's vocabulary and moves between dbt releases (casing, new words
such as no-op); `outcome` is the half downstream code branches on.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "Outcome",
    "OUTCOMES",
    "NODE_RUNNING",
    "NODE_CANCELLED",
    "NODE_NOT_RUN",
    "outcome",
    "totals",
    "precedence",
    "attention",
]

Outcome = Literal["passed", "failed", "warned", "skipped", "no_op", "unknown"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
# A node's status while dbt runs it (it has no outcome yet), the status of one dbt started
# and never reported on when a cancel stopped it (whether its SQL took effect is not known,
# so its outcome is `unknown`), and of one its run would have run but a cancel ended the run
# before dbt reached it (`skipped`): a node's statuses, beside dbt's own, never the run's
# (shared/runs/run_status.py). dbt has no word for the last two.
NODE_RUNNING = "running"
NODE_CANCELLED = "cancelled"
NODE_NOT_RUN = "not run"
# The order every display lists outcomes and nodes in: what needs a look first.
_ATTENTION = {"failed": 0, "warned": 1, "skipped": 2, "unknown": 3, "no_op": 4, "passed": 5}

_BY_STATUS = {
    "success": "passed",
    "pass": "passed",
    "error": "failed",
    "fail": "failed",
    "runtime error": "failed",
    "partial success": "failed",
    "warn": "warned",
    "skipped": "skipped",
    "no-op": "no_op",
    "no_op": "no_op",
    NODE_NOT_RUN: "skipped",
}


def outcome(status: str | None) -> Outcome:
    """The stable outcome for a dbt status; a word dbt adds later is `unknown`, not a crash."""
    return _BY_STATUS.get((status or "").strip().lower(), "unknown")


def totals(outcomes) -> dict[str, int]:
    """Count per outcome, every outcome present so consumers need no defaults."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for value in outcomes:
        counts[value] = counts.get(value, 0) + 1
    return counts


def precedence(attempt_number: int, round_: int) -> tuple[int, int]:
    """The rank of a node's result in its run; the highest stands. A later attempt supersedes
    everything of an earlier one, even retry rounds a lost runner reached, because the new
    attempt rebuilt from the start; within an attempt the later retry round wins."""
    return (attempt_number, round_)


def attention(value: str | None) -> int:
    """Where an outcome is listed: failures first, passes last, a word unknown here after all."""
    return _ATTENTION.get(value or "", len(_ATTENTION))

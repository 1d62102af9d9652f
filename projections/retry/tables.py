"""The retry projection's tables, one definition of each one's columns: the migrations make them,
the fold writes them and the queries read them (tests/stack/test_tables.py holds all three to
it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "retry_state": (
        "project",
        "principal",
        "run_id",
        "attempt",
        "version",
        "run_results_digest",
        "command",
        "args",
        "saved_at",
        "stream_seq",
    ),
}

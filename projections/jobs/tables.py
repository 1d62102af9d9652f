"""The jobs projection's tables, one definition of each one's columns: the migrations make them,
the fold writes them and the queries read them (tests/stack/test_tables.py holds all three to
it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "jobs": (
        "project",
        "name",
        "spec",
        "saved_by",
        "saved_at",
        "stream_seq",
    ),
    "job_schedules": (
        "project",
        "job",
        "state",
        "cron",
        "tz",
        "principal",
        "saved_at",
        "fires",
        "last_fired_at",
        "last_run_id",
        "next_at",
        "stream_seq",
        "coalesced",
    ),
}

"""The hooks projection's tables, one definition of each one's columns: the migrations make them,
the fold writes them and the queries read them (tests/stack/test_tables.py holds all three to
it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "hooks": (
        "project",
        "name",
        "url",
        "events",
        "job",
        "saved_by",
        "saved_at",
        "stream_seq",
    ),
    "hook_deliveries": (
        "delivery_id",
        "attempt",
        "project",
        "hook",
        "run_id",
        "event",
        "status",
        "state",
        "error",
        "at",
        "stream_seq",
    ),
}

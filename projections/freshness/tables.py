"""The freshness projection's tables, one definition of each one's columns: the migrations make
them, the fold writes them and the queries read them (tests/stack/test_tables.py holds all three
to it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "source_freshness": (
        "project",
        "unique_id",
        "status",
        "outcome",
        "message",
        "max_loaded_at",
        "snapshotted_at",
        "age_seconds",
        "warn_after",
        "error_after",
        "run_id",
        "stream_seq",
    ),
}

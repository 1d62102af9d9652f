"""The catalog projection's tables, one definition of each one's columns: the migrations make them,
the fold writes them and the queries read them (tests/stack/test_tables.py holds all three to
it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "node_catalog": (
        "project",
        "unique_id",
        "columns",
        "generated_at",
        "run_id",
        "stream_seq",
    ),
}

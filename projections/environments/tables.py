"""The environments projection's tables, one definition of each one's columns: the migrations make
them, the fold writes them and the queries read them (tests/stack/test_tables.py holds all three
to it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "environments": (
        "project",
        "environment_key",
        "warehouse",
        "target",
        "schema_name",
        "database_name",
        "run_id",
        "version",
        "manifest_digest",
        "run_results_digest",
        "published_at",
        "stream_seq",
    ),
}

"""The projections' own bookkeeping tables, one definition of each one's columns: the migrations
make them, the fold writes them and the queries read them (tests/stack/test_tables.py holds all
three to it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "checkpoints": (
        "projector",
        "last_seq",
        "updated_at",
        "stopped",
        "stopped_since",
    ),
    "dead_letters": (
        "id",
        "projector",
        "stream_seq",
        "subject",
        "data",
        "error",
        "failed_at",
    ),
}

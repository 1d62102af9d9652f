"""The promotions projection's tables, one definition of each one's columns: the migrations make
them, the fold writes them and the queries read them (tests/stack/test_tables.py holds all three
to it)."""

from __future__ import annotations

__all__ = ["TABLES"]

# A slot's row: what each slot runs now (environment_versions) and every promotion that put a
# version there (promotions) have the same columns.
_SLOT = (
    "project",
    "slot",
    "environment",
    "principal",
    "pr",
    "version",
    "previous",
    "deploy_id",
    "promoted_by",
    "promoted_at",
    "stream_seq",
)
TABLES: dict[str, tuple[str, ...]] = {"environment_versions": _SLOT, "promotions": _SLOT}

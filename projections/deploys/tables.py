"""The deploys projection's tables, one definition of each one's columns: the migrations make them,
the fold writes them and the queries read them (tests/stack/test_tables.py holds all three to
it)."""

from __future__ import annotations

__all__ = ["TABLES"]

TABLES: dict[str, tuple[str, ...]] = {
    "deploys": (
        "project",
        "deploy_id",
        "status",
        "version",
        "manifest_digest",
        "engine",
        "engine_version",
        "adapter",
        "adapter_version",
        "files",
        "skipped",
        "reason",
        "requested_by",
        "at",
        "team",
        "door",
        "source",
    ),
}

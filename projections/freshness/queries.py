"""The freshness projection's reads: each source's last freshness check, which a graph page
sets on its source nodes whatever version or run the graph is of."""

from __future__ import annotations

from jetdbt.projections.answers import Database
from jetdbt.projections.by_node import ByNode
from jetdbt.projections.freshness.answers import SourceFreshness

__all__ = ["source_freshness"]

_CHECKS = ByNode(
    "source_freshness",
    ("status", "outcome", "message", "max_loaded_at", "snapshotted_at", "age_seconds",
     "warn_after", "error_after", "run_id"),
    SourceFreshness,
)  # fmt: skip


async def source_freshness(
    db: Database, project: str, after: str | None = None, last: str | None = None
) -> dict[str, SourceFreshness]:
    """The last check of each of the project's sources, by unique_id: those whose id sorts
    after `after` and up to `last` (None: unbounded)."""
    return await _CHECKS.read(db, project, after, last)

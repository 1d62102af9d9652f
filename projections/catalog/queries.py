"""The catalog projection's reads: each node's columns as the last `docs generate` that listed
it found them, which a graph page sets on its nodes whatever version or run the graph is of."""

from __future__ import annotations

from jetdbt.projections.answers import Database
from jetdbt.projections.by_node import ByNode
from jetdbt.projections.catalog.answers import NodeCatalog

__all__ = ["node_catalogs"]

_CATALOGS = ByNode("node_catalog", ("columns", "generated_at", "run_id"), NodeCatalog)


async def node_catalogs(
    db: Database, project: str, after: str | None = None, last: str | None = None
) -> dict[str, NodeCatalog]:
    """The last catalog of each of the project's nodes, by unique_id: those whose id sorts
    after `after` and up to `last` (None: unbounded)."""
    return await _CATALOGS.read(db, project, after, last)

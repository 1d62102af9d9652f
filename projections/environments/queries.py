"""The environments projection's reads: each environment's published state, and the run that
published it, as the API lists them."""

from __future__ import annotations

from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.environments.answers import Environment

__all__ = ["environments"]


async def environments(db: Database, project: str, limit: int, offset: int) -> list[Environment]:
    """A page of the project's published environments, by warehouse, target and key."""
    fetched = await db.fetch(
        "SELECT warehouse, target, schema_name AS schema, database_name AS database, run_id,"
        " version, manifest_digest, run_results_digest IS NOT NULL AS has_run_results,"
        " published_at FROM environments WHERE project = $1"
        " ORDER BY warehouse, target, environment_key LIMIT $2 OFFSET $3",
        project,
        limit,
        offset,
    )
    return [shaped(Environment, dict(r)) for r in fetched]

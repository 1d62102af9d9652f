"""The retry projection's reads: per principal, which run of a project a retry would resume, as
the API lists it."""

from __future__ import annotations

from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.retry.answers import RetryState

__all__ = ["retry_states"]


async def retry_states(db: Database, project: str, limit: int, offset: int) -> list[RetryState]:
    """A page of the project's retry states, by principal."""
    fetched = await db.fetch(
        "SELECT principal, run_id, attempt, version, command, args, saved_at"
        " FROM retry_state WHERE project = $1 ORDER BY principal LIMIT $2 OFFSET $3",
        project,
        limit,
        offset,
    )
    return [shaped(RetryState, dict(r)) for r in fetched]

"""The deploys projection's reads: a project's deploys as the API lists them, and the team that
holds a project, which decides who may read it."""

from __future__ import annotations

from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.deploys.answers import Deploy

__all__ = ["deploys", "project_team"]


async def deploys(db: Database, project: str, limit: int, offset: int) -> list[Deploy]:
    """A page of the project's deploys, newest first."""
    fetched = await db.fetch(
        "SELECT deploy_id, status, version, manifest_digest, engine, engine_version, adapter,"
        " adapter_version, skipped, reason, requested_by, team, door, source, at FROM deploys"
        " WHERE project = $1 ORDER BY at DESC, deploy_id LIMIT $2 OFFSET $3",
        project,
        limit,
        offset,
    )
    return [shaped(Deploy, dict(r)) for r in fetched]


async def project_team(db: Database, project: str) -> str | None:
    """A project's team: the team of its latest deploy that names one; None when none does."""
    return await db.fetchval(
        "SELECT team FROM deploys WHERE project = $1 AND team <> '' ORDER BY at DESC LIMIT 1",
        project,
    )

"""The promotions projection's reads: what each slot of a project runs and the promotions that
moved it, as the API lists them."""

from __future__ import annotations

from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.promotions.answers import SlotVersion

__all__ = ["versions", "promotions"]

_SLOT = "slot, environment, principal, pr, version, previous, deploy_id, promoted_by, promoted_at"
# Both tables hold slot rows; `environment` None reads every environment's.
_WHERE = "WHERE project = $1 AND ($2::text IS NULL OR environment = $2)"


async def versions(
    db: Database, project: str, environment: str | None, limit: int, offset: int
) -> list[SlotVersion]:
    """A page of what each slot runs now, by pull request, environment and principal."""
    fetched = await db.fetch(
        f"SELECT {_SLOT} FROM environment_versions {_WHERE}"
        " ORDER BY pr, environment, principal LIMIT $3 OFFSET $4",
        project,
        environment,
        limit,
        offset,
    )
    return [shaped(SlotVersion, dict(r)) for r in fetched]


async def promotions(
    db: Database, project: str, environment: str | None, limit: int, offset: int
) -> list[SlotVersion]:
    """A page of the project's promotions, newest first."""
    fetched = await db.fetch(
        f"SELECT {_SLOT} FROM promotions {_WHERE} ORDER BY stream_seq DESC LIMIT $3 OFFSET $4",
        project,
        environment,
        limit,
        offset,
    )
    return [shaped(SlotVersion, dict(r)) for r in fetched]

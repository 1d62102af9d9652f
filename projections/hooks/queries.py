"""The hooks projection's reads: a project's webhooks and each one's delivery attempts, as the
API lists them (never a secret, never what a receiver sent)."""

from __future__ import annotations

from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.hooks.answers import Hook, HookDelivery
from jetdbt.shared.jobs import hook_reasons

__all__ = ["hooks", "deliveries"]


async def hooks(db: Database, project: str, limit: int, offset: int) -> list[Hook]:
    """A page of the project's webhooks, by name."""
    fetched = await db.fetch(
        "SELECT name, url, events AS on, job, saved_by, saved_at FROM hooks"
        " WHERE project = $1 ORDER BY name LIMIT $2 OFFSET $3",
        project,
        limit,
        offset,
    )
    return [shaped(Hook, dict(r)) for r in fetched]


async def deliveries(
    db: Database, project: str, hook: str, state: str | None, limit: int, offset: int
) -> list[HookDelivery]:
    """A page of one webhook's delivery attempts, newest first (`state`: of that state only)."""
    fetched = await db.fetch(
        "SELECT delivery_id, attempt, run_id, event, status, state, error, at"
        " FROM hook_deliveries WHERE project = $1 AND hook = $2"
        " AND ($3::text IS NULL OR state = $3) ORDER BY stream_seq DESC"
        " LIMIT $4 OFFSET $5",
        project,
        hook,
        state,
        limit,
        offset,
    )
    # An attempt recorded before the vocabulary may quote a receiver's bytes.
    return [
        shaped(HookDelivery, {**r, "error": hook_reasons.served(r["error"], r["status"])})
        for r in fetched
    ]

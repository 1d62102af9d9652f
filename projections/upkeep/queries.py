"""Reads of the projections' own bookkeeping, for the routes that say how the projections fare
and what they could not apply."""

from __future__ import annotations

from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.upkeep.answers import DeadLetter

__all__ = ["stopped_projections", "dead_letters"]


async def stopped_projections(db: Database) -> list[str]:
    """The projections a bug in their fold stopped, by name."""
    fetched = await db.fetch(
        "SELECT projector FROM checkpoints WHERE stopped IS NOT NULL ORDER BY projector"
    )
    return [r["projector"] for r in fetched]


# An event is far below 1 MiB, yet a page of a thousand near it would not be: a dead
# letter shows its first 64 KiB (the reason is near the start) and says its size.
_DATA_SHOWN = 64 * 1024


async def dead_letters(
    db: Database, projection: str | None, limit: int, offset: int
) -> list[DeadLetter]:
    """A page of dead letters, oldest first per projection (`projection`: its own only)."""
    fetched = await db.fetch(
        "SELECT id, projector, stream_seq, subject, error, failed_at,"
        " substring(data FROM 1 FOR $4) AS data, octet_length(data) AS data_size"
        " FROM dead_letters WHERE $1::text IS NULL OR projector = $1"
        " ORDER BY projector, stream_seq LIMIT $2 OFFSET $3",
        projection,
        limit,
        offset,
        _DATA_SHOWN,
    )
    # The stored bytes as text (invalid UTF-8 replaced): often the reason.
    return [
        shaped(DeadLetter, {**r, "data": bytes(r["data"]).decode(errors="replace")})
        for r in fetched
    ]

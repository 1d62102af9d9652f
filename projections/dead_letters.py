"""Events a projection could not apply: applying them again after a fix (the API lists them).

A retry re-decodes the stored bytes and applies them with today's fold, one
transaction per dead letter, deleting the row in the same transaction; one that
fails again stays, with its new error.
"""

from __future__ import annotations

import msgspec
from jetdbt.projections.registry import FOLDS
from jetdbt.shared.bus import events
from jetdbt.shared.bus.outages import outage
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.wording.short_quote import storable

__all__ = ["Retried", "retry"]


class Retried(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    projector: str
    stream_seq: int
    applied: bool
    error: str | None = None


async def retry(pool, bus, projector: str | None = None) -> list[Retried]:
    """Apply every dead letter (of `projector`) again, oldest first."""
    log = jlog.get("dead_letters")
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, projector, stream_seq, data FROM dead_letters"
            " WHERE $1::text IS NULL OR projector = $1 ORDER BY stream_seq, projector",
            projector,
        )
    folds = {}
    out = []
    for row in rows:
        name, seq = row["projector"], row["stream_seq"]
        error = None
        if name not in FOLDS:
            error = f"no projection named {name!r}; known: {', '.join(FOLDS)}"
        else:
            error = await _apply(pool, folds.setdefault(name, FOLDS[name](bus)), row)
        if error:
            log.warning("dead_letter_failed_again", projector=name, seq=seq, error=error)
        else:
            log.info("dead_letter_applied", projector=name, seq=seq)
        out.append(
            Retried(id=row["id"], projector=name, stream_seq=seq, applied=not error, error=error)
        )
    return out


async def _apply(pool, fold, row) -> str | None:
    """Apply one dead letter and delete it, in one transaction; the new error if it fails."""
    async with pool.acquire() as conn:
        try:
            async with conn.transaction():
                await fold.apply(conn, events.decode(row["data"]), row["stream_seq"])
                await conn.execute("DELETE FROM dead_letters WHERE id = $1", row["id"])
        except Exception as exc:  # noqa: BLE001 - poison, or today's fold's bug: said, kept
            if outage(exc) is not None:
                raise  # NATS or Postgres away: no row's fault, and the rest would wait too
            error = storable(f"{exc.__class__.__name__}: {exc}")
            await conn.execute(
                "UPDATE dead_letters SET error = $2, failed_at = now() WHERE id = $1",
                row["id"],
                error,
            )
            return error
    return None

"""Promotions fold: what each slot of a project runs (`environment_versions`) and every
promotion that moved one (`promotions`), served by GET .../versions and .../promotions.

A Promoted event moves its slot. Before environments every deploy made its version the
current one, so a Deployed event that says so (`current`) folds as a promotion into the
default environment, from whatever that held. A promotion of the version a slot holds
already (a runner carrying an old log's current version over as an event) changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from jetdbt.shared.bus import events as ev
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT

__all__ = ["PromotionsFold"]

_COLUMNS = (
    "project, slot, environment, principal, pr, version, previous, deploy_id, promoted_by,"
    " promoted_at, stream_seq"
)


class _Move(NamedTuple):
    project: str
    slot: str
    environment: str
    principal: str
    pr: int
    version: str
    previous: str | None  # None: whatever the slot held
    deploy_id: str
    promoted_by: str
    promoted_at: datetime


def _move(event: ev.Event) -> _Move | None:
    if isinstance(event, ev.Promoted):
        return _Move(
            event.project,
            event.slot(),
            event.environment,
            event.principal,
            event.pr,
            event.version,
            event.previous,
            event.deploy_id,
            event.requested_by,
            event.at,
        )
    if isinstance(event, ev.Deployed) and event.current and not event.pr:
        return _Move(
            event.project,
            DEFAULT_ENVIRONMENT,
            DEFAULT_ENVIRONMENT,
            "",
            0,
            event.version,
            None,
            event.deploy_id,
            event.requested_by,
            event.at,
        )
    return None


class PromotionsFold:
    name = "promotions"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        move = _move(event)
        if move is None:
            return
        held = await conn.fetchval(
            "SELECT version FROM environment_versions WHERE project = $1 AND slot = $2",
            move.project,
            move.slot,
        )
        if held == move.version:
            return
        previous = (held or "") if move.previous is None else move.previous
        row = (*move._replace(previous=previous), seq)
        await conn.execute(
            f"INSERT INTO promotions ({_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)"
            " ON CONFLICT (project, stream_seq) DO NOTHING",
            *row,
        )
        await conn.execute(
            f"INSERT INTO environment_versions ({_COLUMNS})"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) ON CONFLICT (project, slot) DO UPDATE"
            " SET environment = EXCLUDED.environment, principal = EXCLUDED.principal,"
            " pr = EXCLUDED.pr, version = EXCLUDED.version, previous = EXCLUDED.previous,"
            " deploy_id = EXCLUDED.deploy_id, promoted_by = EXCLUDED.promoted_by,"
            " promoted_at = EXCLUDED.promoted_at, stream_seq = EXCLUDED.stream_seq"
            " WHERE environment_versions.stream_seq < EXCLUDED.stream_seq",
            *row,
        )

"""Hooks fold: every webhook of a project as its last `hook.saved` says (gone after a
`hook.removed` further along), and each delivery attempt the notifier recorded."""

from __future__ import annotations

from jetdbt.shared.bus import events as ev

__all__ = ["HooksFold"]


class HooksFold:
    name = "hooks"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if isinstance(event, ev.HookSaved):
            await conn.execute(
                "INSERT INTO hooks (project, name, url, events, job, saved_by, saved_at,"
                " stream_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (project, name)"
                " DO UPDATE SET url = EXCLUDED.url, events = EXCLUDED.events,"
                " job = EXCLUDED.job, saved_by = EXCLUDED.saved_by,"
                " saved_at = EXCLUDED.saved_at, stream_seq = EXCLUDED.stream_seq"
                " WHERE hooks.stream_seq < EXCLUDED.stream_seq",
                event.project,
                event.name,
                event.url,
                event.on,
                event.job,
                event.saved_by,
                event.at,
                seq,
            )
        elif isinstance(event, ev.HookRemoved):
            await conn.execute(
                "DELETE FROM hooks WHERE project = $1 AND name = $2 AND stream_seq < $3",
                event.project,
                event.name,
                seq,
            )
        elif isinstance(event, ev.HookDelivered):
            await conn.execute(
                "INSERT INTO hook_deliveries (delivery_id, attempt, project, hook, run_id,"
                " event, status, state, error, at, stream_seq)"
                " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) ON CONFLICT DO NOTHING",
                event.delivery_id,
                event.attempt,
                event.project,
                event.hook,
                event.run_id,
                event.event,
                event.status,
                event.state,
                event.error,
                event.at,
                seq,
            )

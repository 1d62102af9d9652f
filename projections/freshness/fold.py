"""Freshness fold: each source's last `dbt source freshness` outcome, per project.

A `source freshness` run's RunFinished carries every source it checked, each with dbt's
status (pass, warn, error, runtime error) and the freshness sources.json measured. The
row of a source is its latest check by stream order; a source a cancel stopped was not
checked, so it keeps the check before. When dbt says nothing of when it looked, the
run's end stands for it (the event's time: a replay folds the same row).
"""

from __future__ import annotations

import msgspec
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import FreshnessCommand
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.runs.outcomes import NODE_CANCELLED

__all__ = ["FreshnessFold", "CHECKED"]

CHECKED = FreshnessCommand.__struct_config__.tag  # a freshness run's result `command`

_UPSERT = (
    "INSERT INTO source_freshness (project, unique_id, status, outcome, message, max_loaded_at,"
    " snapshotted_at, age_seconds, warn_after, error_after, run_id, stream_seq)"
    " SELECT $1, u, st, oc, ms, ml, sn, ag, wa::jsonb, ea::jsonb, $2, $3 FROM unnest($4::text[],"
    " $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::timestamptz[], $10::float8[],"
    " $11::text[], $12::text[]) AS x(u, st, oc, ms, ml, sn, ag, wa, ea)"
    " ON CONFLICT (project, unique_id) DO UPDATE SET status = EXCLUDED.status,"
    " outcome = EXCLUDED.outcome, message = EXCLUDED.message,"
    " max_loaded_at = EXCLUDED.max_loaded_at, snapshotted_at = EXCLUDED.snapshotted_at,"
    " age_seconds = EXCLUDED.age_seconds, warn_after = EXCLUDED.warn_after,"
    " error_after = EXCLUDED.error_after, run_id = EXCLUDED.run_id,"
    " stream_seq = EXCLUDED.stream_seq WHERE source_freshness.stream_seq < EXCLUDED.stream_seq"
)


def _json(value) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


class FreshnessFold:
    """Reads the blob a large run's RunFinished keeps its nodes in (reading, not publishing)."""

    name = "freshness"

    def __init__(self, bus: Bus | None = None):
        self.bus = bus

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if not isinstance(event, ev.RunFinished) or event.result.mode != CHECKED:
            return
        finished = await event_blobs.resolved(self.bus, event)
        checked = {
            n.unique_id: n
            for n in finished.result.nodes
            if n.resource_type == "source" and n.status != NODE_CANCELLED
        }
        if not checked:
            return
        nodes = [checked[k] for k in sorted(checked)]
        fresh = [n.freshness or ev.Freshness() for n in nodes]
        looked = [
            f.snapshotted_at or n.finished_at or event.at for f, n in zip(fresh, nodes, strict=True)
        ]
        await conn.execute(
            _UPSERT,
            event.project,
            event.run_id,
            seq,
            [n.unique_id for n in nodes],
            [n.status for n in nodes],
            [n.outcome for n in nodes],
            [n.message for n in nodes],
            [f.max_loaded_at for f in fresh],
            looked,
            [f.age_seconds for f in fresh],
            [_json(f.warn_after) for f in fresh],
            [_json(f.error_after) for f in fresh],
        )

"""Catalog fold: each node's columns with their warehouse types, per project, from the last
`dbt docs generate` that listed the node (a CatalogGenerated event).

A node's row is replaced by a later catalog that lists it and left as it is by one that does
not (a catalog of a selection lists only part of the project). The catalog's nodes may be in
a blob (shared/blobs/event_blobs.py reads it, bounded): one that cannot be read, or is too large,
is a poison event the projector loop dead-letters. When dbt says nothing of when it
generated the catalog, the event's time stands for it.
"""

from __future__ import annotations

import msgspec
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus

__all__ = ["CatalogFold"]

_UPSERT = (
    "INSERT INTO node_catalog (project, unique_id, columns, generated_at, run_id, stream_seq)"
    " SELECT $1, u, c::jsonb, $2, $3, $4 FROM unnest($5::text[], $6::text[]) AS x(u, c)"
    " ON CONFLICT (project, unique_id) DO UPDATE SET columns = EXCLUDED.columns,"
    " generated_at = EXCLUDED.generated_at, run_id = EXCLUDED.run_id,"
    " stream_seq = EXCLUDED.stream_seq WHERE node_catalog.stream_seq < EXCLUDED.stream_seq"
)


class CatalogFold:
    """Reads the blob a large catalog keeps its nodes in (reading, not publishing)."""

    name = "catalog"

    def __init__(self, bus: Bus | None = None):
        self.bus = bus

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if not isinstance(event, ev.CatalogGenerated):
            return
        generated = await event_blobs.resolved(self.bus, event)
        listed = {n.unique_id: n for n in generated.nodes}
        if not listed:
            return
        nodes = [listed[k] for k in sorted(listed)]
        await conn.execute(
            _UPSERT,
            event.project,
            event.generated_at or event.at,
            event.run_id,
            seq,
            [n.unique_id for n in nodes],
            [msgspec.json.encode(n.columns).decode() for n in nodes],
        )

"""What grows with a project travels beside its event: a list too large to carry inline
(a run's nodes, a version's files) is stored as a blob the event names.

A 6,000-node result encodes to megabytes, over NATS's payload limit, so past INLINE_BYTES
the runner stores the list in DBT_BLOBS and the event names that blob by digest, size and
count (`nodes_blob` of RunFinished, `files_blob` of Deployed) with the inline list empty.
Every reader (the projections, the CLI, the audit) goes through `resolved`, so each sees
the same whole event either way. A catalog's blob is read only up to CATALOG_BYTES: a
blob past it is refused (the reading fold dead-letters its event), never held in memory.
"""

from __future__ import annotations

from typing import Any

import msgspec
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import BlobUnreadable, Bus
from nats.js.errors import ObjectNotFoundError

__all__ = ["INLINE_BYTES", "CATALOG_BYTES", "split", "result_split", "resolved"]

# A list encoded to at most this stays in its event: a small run or version costs no blob
# to write or read, and the event stays far below MAX_EVENT_BYTES beside what else it says.
INLINE_BYTES = 64 * 1024
# The most a catalog's nodes may weigh in their blob: far over what the runner's bounds
# (services/runner/after/catalog.py) let it write.
CATALOG_BYTES = 32 * 1024 * 1024

_nodes = msgspec.json.Decoder(list[ev.NodeResult])
_files = msgspec.json.Decoder(list[str])
_catalog = msgspec.json.Decoder(list[ev.CatalogNode])


async def split(bus: Bus, items: list) -> tuple[list, ev.Blob | None]:
    """`items` as an event carries them: inline, or (empty, the blob now holding them) when
    they encode past INLINE_BYTES. Stored masked, like every blob a runner writes."""
    data = msgspec.json.encode(items)
    if len(data) <= INLINE_BYTES:
        return items, None
    digest = await bus.put_blob(data)
    return [], ev.Blob(digest=digest, size=len(data), count=len(items))


async def result_split(bus: Bus, result: ev.RunResult) -> tuple[ev.RunResult, ev.Blob | None]:
    """The result as RunFinished carries it, and the blob holding its nodes, if any."""
    nodes, blob = await split(bus, result.nodes)
    return msgspec.structs.replace(result, nodes=nodes), blob


async def _read(
    bus: Bus | None, event: ev.Event, blob: ev.Blob, decoder, limit: int | None = None
) -> list[Any]:
    if bus is None:
        raise BlobUnreadable(f"event {event.event_id()} keeps a list in blob {blob.digest}")
    try:
        return decoder.decode(await bus.get_blob(blob.digest, limit))
    except ObjectNotFoundError:
        raise BlobUnreadable(
            f"blob {blob.digest}, named by event {event.event_id()}, is not in the object store"
        ) from None


async def resolved(bus: Bus | None, event: ev.Event) -> ev.Event:
    """`event` with what it keeps in a blob read back inline (its digest checked); any other
    event as it is. Raises BlobUnreadable when the blob cannot be read."""
    if isinstance(event, ev.RunFinished) and event.nodes_blob is not None:
        nodes = await _read(bus, event, event.nodes_blob, _nodes)
        return msgspec.structs.replace(
            event, result=msgspec.structs.replace(event.result, nodes=nodes)
        )
    if isinstance(event, ev.CatalogGenerated) and event.nodes_blob is not None:
        nodes = await _read(bus, event, event.nodes_blob, _catalog, CATALOG_BYTES)
        return msgspec.structs.replace(event, nodes=nodes)
    if isinstance(event, ev.Deployed) and event.files_blob is not None:
        files = await _read(bus, event, event.files_blob, _files)
        return msgspec.structs.replace(event, files=files)
    return event

"""A run's nodes as RunFinished carries them: inline while they are small, else in a blob.

A result's nodes grow with the project (a 6,000-node build encodes to megabytes, over
NATS's payload limit), so past INLINE_BYTES the runner stores them in DBT_BLOBS and
RunFinished names that blob by digest, size and count. Every reader (the projection, the
CLI, the audit) goes through `resolved`, so each sees the same whole result either way.
"""

from __future__ import annotations

import msgspec
from nats.js.errors import ObjectNotFoundError

from shared import events as ev
from shared.bus import Bus

__all__ = ["INLINE_BYTES", "split", "resolved", "nodes_of"]

# Encoded nodes up to this size stay in the event: a small run costs no blob to write or
# read, and the event stays far below MAX_EVENT_BYTES beside the invocation arguments.
INLINE_BYTES = 64 * 1024

_nodes = msgspec.json.Decoder(list[ev.NodeResult])


async def split(bus: Bus, result: ev.RunResult) -> tuple[ev.RunResult, ev.Blob | None]:
    """The result as RunFinished carries it, and the blob holding its nodes when they are
    too large to travel inline (stored here, masked like every blob a runner writes)."""
    data = msgspec.json.encode(result.nodes)
    if len(data) <= INLINE_BYTES:
        return result, None
    digest = await bus.put_blob(data)
    blob = ev.Blob(digest=digest, size=len(data), count=len(result.nodes))
    return msgspec.structs.replace(result, nodes=[]), blob


async def nodes_of(bus: Bus | None, finished: ev.RunFinished) -> list[ev.NodeResult]:
    """Every node of the result: inline, or read from the blob RunFinished names (its
    digest checked). Raises ValueError when the blob cannot be read."""
    blob = finished.nodes
    if blob is None:
        return finished.result.nodes
    if bus is None:
        raise ValueError(f"run {finished.run_id!r} keeps its nodes in blob {blob.digest}")
    try:
        return _nodes.decode(await bus.get_blob(blob.digest))
    except ObjectNotFoundError:
        raise ValueError(
            f"the nodes of run {finished.run_id!r} (blob {blob.digest}) are not in the object store"
        ) from None


async def resolved(bus: Bus | None, event: ev.Event) -> ev.Event:
    """`event`, with a RunFinished's nodes inline however they travelled."""
    if not isinstance(event, ev.RunFinished) or event.nodes is None:
        return event
    result = msgspec.structs.replace(event.result, nodes=await nodes_of(bus, event))
    return msgspec.structs.replace(event, result=result)

"""Which bundle a deploy uploaded: the record that binds a deploy command to its bundle.

Bundles are stored by content digest, so any digest in the object store (an older
version's) could be named by a deploy command and roll a project back. The uploader of a
deploy's bundle also stores `upload.<deploy_id>` holding the digest; a runner deploys only
the digest its deploy's record names. Only the operator's, the runners' and the API's NATS
users may write the object store (the API for a deploy a token uploaded,
services/api/deploy_routes.py), so no external system can make such a record.
"""

from __future__ import annotations

import contextlib

from jetdbt.shared.bus.streams import BLOBS
from nats.js.errors import NotFoundError, ObjectNotFoundError

__all__ = ["record", "recorded", "forget"]


def _name(deploy_id: str) -> str:
    return f"upload.{deploy_id}"


async def record(bus, deploy_id: str, digest: str) -> None:
    store = await bus.js.object_store(BLOBS)
    await store.put(_name(deploy_id), digest.encode())


async def recorded(bus, deploy_id: str) -> str | None:
    """The digest the deploy's upload named, or None when it made none."""
    store = await bus.js.object_store(BLOBS)
    try:
        found = await store.get(_name(deploy_id))
    except (ObjectNotFoundError, NotFoundError):
        return None
    return (found.data or b"").decode(errors="replace")


async def forget(bus, deploy_id: str) -> None:
    """Drop the record once its deploy ended (a redelivered command is settled by then)."""
    store = await bus.js.object_store(BLOBS)
    with contextlib.suppress(ObjectNotFoundError, NotFoundError):
        await store.delete(_name(deploy_id))

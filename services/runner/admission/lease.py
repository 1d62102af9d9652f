"""One build per environment: a lease in DBT_LEASES, held while dbt runs.

Two builds of one project and environment collide (two DuckDB builds on the file
lock, two warehouse builds double-appending an incremental model), and a
redelivered attempt must never build while an earlier attempt of the same run may
still write. So an attempt takes its environment's lease before RunStarted, renews
it on a beat, and releases it at the end. The bucket's TTL is the fence: a runner
that dies stops renewing and the lease expires; a runner that cannot renew (NATS
away) for most of the TTL stops its own dbt, since after the TTL another attempt
may hold the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import msgspec
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.streams import LEASES
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

__all__ = ["Lease", "LeaseBusy", "LeaseLost", "lease_key", "FENCE"]

# The part of the TTL after which a runner that could not renew stops its own dbt: well
# before the lease can expire and another attempt take it.
FENCE = 0.6
# How often `take` creates again when the holder's entry expired while create looked at it.
CREATE_TRIES = 3


class LeaseBusy(Exception):
    """Another run holds the key: this one waits, holding no slot."""

    def __init__(self, holder: dict, what: str):
        super().__init__(f"{what} is held by run {holder.get('run_id')!r}")
        self.holder = holder


class LeaseLost(Exception):
    """The lease could not be renewed within its TTL: another attempt may hold it now."""


def lease_key(environment: str) -> str:
    """A KV key for an environment's description (any text becomes a valid key)."""
    return "env-" + hashlib.sha256(environment.encode()).hexdigest()[:40]


class Lease:
    """One key of DBT_LEASES held by one attempt: an environment, a team slot, a run slot.
    `what` names it in errors and logs."""

    def __init__(self, bus: Bus, key: str, what: str, holder: dict):
        self.bus, self.key, self.what = bus, key, what
        self.value = msgspec.json.encode({**holder, "what": what})
        self.revision: int | None = None
        self.ttl = 0.0
        # Set when the lease is given up: `keep` ends on it, not only on a cancel, which is
        # lost on Python 3.11 when it lands as a renewal is answered (nats-py's wait_for).
        self.letting_go = asyncio.Event()
        self.log = jlog.get("lease", lease=what, **holder)

    async def _bucket(self):
        return await self.bus.js.key_value(LEASES)

    async def take(self) -> None:
        """Hold the lease, or raise LeaseBusy naming who holds it."""
        kv = await self._bucket()
        self.ttl = (await kv.status()).ttl or 0.0
        for _ in range(CREATE_TRIES):
            try:
                self.revision = await kv.create(self.key, self.value)
                return
            except KeyNotFoundError:
                # create found the key held, then its entry expired before create could read
                # it (a killed holder's lease running out): free now, so create again.
                continue
            except KeyWrongLastSequenceError:
                try:
                    holder = msgspec.json.decode((await kv.get(self.key)).value or b"{}")
                except Exception:  # noqa: BLE001 - gone meanwhile, or unreadable: busy all the same
                    holder = {}
                raise LeaseBusy(holder, self.what) from None
        raise LeaseBusy({}, self.what)

    async def keep(self, lost: asyncio.Event) -> None:
        """Renew on a beat until cancelled or let go. A watchdog, not the outcome of a
        request, fences: once FENCE of the TTL has passed since the last renewal was sent,
        `lost` is set, whatever a renewal in flight would still say (another attempt may
        hold it soon)."""
        if not self.ttl:
            return
        loop = asyncio.get_running_loop()
        fence_at = loop.time() + self.ttl * FENCE
        while not self.letting_go.is_set():
            await supervise.pause(
                self.letting_go, max(0.0, min(self.ttl / 4, fence_at - loop.time()))
            )
            if self.letting_go.is_set():
                return
            sent, left = loop.time(), fence_at - loop.time()
            if left <= 0:
                self.log.warning("lease_not_renewed", seconds=self.ttl * FENCE)
                lost.set()
                return
            try:
                kv = await asyncio.wait_for(self._bucket(), left)
                self.revision = await asyncio.wait_for(
                    kv.update(self.key, self.value, last=self.revision), left
                )
                fence_at = sent + self.ttl * FENCE
            except KeyWrongLastSequenceError:
                self.log.warning("lease_taken_over")
                lost.set()
                return
            except Exception as exc:  # noqa: BLE001 - NATS away or closed: the watchdog decides
                self.log.warning("lease_renewal_failed", error=repr(exc))

    async def release(self) -> None:
        """Delete the key if it is still ours. A renewal cancelled in flight may have stored
        a revision this lease never heard of: the key still holding our value is ours, and
        left alone it would keep the next run waiting for its TTL."""
        self.letting_go.set()
        if self.revision is None:
            return
        with contextlib.suppress(Exception):
            kv = await self._bucket()
            try:
                await kv.delete(self.key, last=self.revision)
            except Exception:  # noqa: BLE001 - a newer revision, or NATS away: look once
                entry = await kv.get(self.key)
                if entry.value == self.value:
                    await kv.delete(self.key, last=entry.revision)
        self.revision = None

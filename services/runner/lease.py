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
from nats.js.errors import KeyWrongLastSequenceError

from shared import logging as jlog
from shared.bus import LEASES, TRANSIENT, Bus

__all__ = ["Lease", "LeaseBusy", "LeaseLost", "lease_key"]


class LeaseBusy(Exception):
    """Another run holds the environment: this one waits, holding no slot."""

    def __init__(self, holder: dict, environment: str):
        super().__init__(f"waiting for run {holder.get('run_id')!r} on {environment}")
        self.holder = holder


class LeaseLost(Exception):
    """The lease could not be renewed within its TTL: another attempt may hold it now."""


def lease_key(environment: str) -> str:
    """A KV key for an environment's description (any text becomes a valid key)."""
    return "env-" + hashlib.sha256(environment.encode()).hexdigest()[:40]


class Lease:
    def __init__(self, bus: Bus, environment: str, holder: dict):
        self.bus, self.environment = bus, environment
        self.key = lease_key(environment)
        self.value = msgspec.json.encode({**holder, "environment": environment})
        self.revision: int | None = None
        self.log = jlog.get("lease", environment=environment, **holder)

    async def _bucket(self):
        return await self.bus.js.key_value(LEASES)

    async def ttl(self) -> float:
        status = await (await self._bucket()).status()
        return status.ttl or 0.0

    async def take(self) -> None:
        """Hold the lease, or raise LeaseBusy naming who holds it."""
        kv = await self._bucket()
        try:
            self.revision = await kv.create(self.key, self.value)
        except KeyWrongLastSequenceError:
            try:
                holder = msgspec.json.decode((await kv.get(self.key)).value or b"{}")
            except Exception:  # noqa: BLE001 - gone meanwhile, or unreadable: busy all the same
                holder = {}
            raise LeaseBusy(holder, self.environment) from None

    async def keep(self, lost: asyncio.Event) -> None:
        """Renew on a beat until cancelled; set `lost` when the lease cannot be kept."""
        ttl = await self.ttl()
        if not ttl:
            return
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while True:
            await asyncio.sleep(ttl / 4)
            try:
                kv = await self._bucket()
                self.revision = await kv.update(self.key, self.value, last=self.revision)
                renewed = loop.time()
            except KeyWrongLastSequenceError:
                self.log.warning("lease_taken_over")
                lost.set()
                return
            except TRANSIENT:
                if loop.time() - renewed > ttl * 0.75:
                    self.log.warning("lease_not_renewed", seconds=loop.time() - renewed)
                    lost.set()
                    return

    async def release(self) -> None:
        if self.revision is None:
            return
        with contextlib.suppress(Exception):
            await (await self._bucket()).delete(self.key, last=self.revision)
        self.revision = None

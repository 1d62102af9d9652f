"""One projector process folds at a time; the others stand by and take over when it dies.

The turn is the key `active` of DBT_PROJECTORS, taken with `create` (one taker wins) and
renewed on a beat; each standby keeps a key of its own there, so /healthz can name it.

A standby judges the holder by its own clock, not by the bucket's TTL nor by a time in
the value: a bucket's TTL is fixed when it is made (a test or an operator could not
shorten it), and two hosts' clocks disagree. The standby notes when it first saw the
key's revision; once that revision has gone unchanged for the holder's own `seconds`
(carried in the value, so a standby configured otherwise still waits the holder's
term), it replaces exactly that revision (`update` with `last`: a renewal in between
makes it fail). The holder fences itself: FENCE of its term after the last renewal it
sent went unanswered, it stops folding, before any standby (which started counting no
earlier than that renewal was stored) can take over. The bucket's TTL only clears the
keys of processes that are all gone.

The lease keeps folding to one process in normal operation; the checkpoint row a batch
locks (projections/loop.py) keeps a fenced projector's last batch, committing late,
from applying what its successor applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable

import msgspec
from jetdbt.shared.bus import kv_keys
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.streams import PROJECTORS
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

__all__ = ["ActiveLease", "Holder", "Roles", "Sightings", "ACTIVE", "FENCE", "roles"]

ACTIVE = "active"
STANDBY = "standby-"
# The part of its term after which a holder that could not renew stops folding.
FENCE = 0.6
# Renewals (and a standby's looks at the holder) per term.
BEATS = 4


class Holder(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A key's value: which process, and how long it stays active unrenewed."""

    name: str
    seconds: float


class Roles(msgspec.Struct, frozen=True):
    """Which projector process folds, and which stand by (as far as this reader knows)."""

    active: str | None
    standbys: list[str]


def standby_key(name: str) -> str:
    """A KV key for a process name (any text becomes a valid key)."""
    return STANDBY + hashlib.sha256(name.encode()).hexdigest()[:32]


def _holder(value: bytes | None, fallback: float) -> Holder:
    """The value as written; anything else is an unnamed holder with `fallback`'s term."""
    try:
        found = msgspec.json.decode(value or b"", type=Holder)
    except msgspec.DecodeError:
        return Holder("unknown", fallback)
    return found if 0 < found.seconds < float("inf") else Holder(found.name, fallback)


class Sightings:
    """When this process first saw each key's revision, on its own clock."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, float]] = {}

    def fresh(self, key: str, revision: int, seconds: float) -> bool:
        """Whether `revision` of `key` changed less than `seconds` ago, as far as this
        process saw: a revision first seen now counts as new."""
        now = asyncio.get_running_loop().time()
        seen = self._seen.get(key)
        if seen is None or seen[0] != revision:
            self._seen[key] = (revision, now)
            return True
        return now - seen[1] < seconds


async def roles(bus: Bus, sightings: Sightings) -> Roles:
    """The active projector and the standbys, leaving out keys that went unrenewed for
    their holder's term since `sightings` first saw them (a process SIGKILLed)."""
    kv = await bus.js.key_value(PROJECTORS)
    active, standbys = None, []
    for key in await kv_keys.keys(bus, PROJECTORS):
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:  # gone meanwhile
            continue
        holder = _holder(entry.value, 1.0)
        if not sightings.fresh(key, entry.revision or 0, holder.seconds):
            continue
        if key == ACTIVE:
            active = holder.name
        elif key.startswith(STANDBY):
            standbys.append(holder.name)
    return Roles(active, sorted(set(standbys) - {active}))


class ActiveLease:
    """Folds only while this process holds `active`; stands by otherwise, until stopped."""

    def __init__(self, bus: Bus, name: str, seconds: float):
        self.bus = bus
        self.name = name
        self.seconds = seconds
        self.value = msgspec.json.encode(Holder(name, seconds))
        self.revision: int | None = None
        self.sightings = Sightings()
        self.log = jlog.get("projector_lease", process=name)

    async def run(
        self, stop: asyncio.Event, fold: Callable[[asyncio.Event], Awaitable[None]]
    ) -> None:
        """Run `fold(halt)` whenever this process holds the lease; `halt` is set when it
        stops or is fenced, and `fold` must end on it (the lease waits for that)."""
        await supervise.forever(
            lambda stop: self._turn(stop, fold), stop, self.log, "projector_lease_failed"
        )

    async def _turn(self, stop: asyncio.Event, fold) -> None:
        kv = await self.bus.js.key_value(PROJECTORS)
        try:
            if not await self._take(kv, stop):
                return
            halt = asyncio.Event()
            keeper = asyncio.create_task(self._keep(kv, stop, halt))
            try:
                await fold(halt)
            finally:
                halt.set()
                await keeper
        finally:
            await self._leave(kv)

    async def _take(self, kv, stop: asyncio.Event) -> bool:
        """Stand by until the lease is ours; False once `stop` is set first."""
        while not await self._seized(kv):
            await kv.put(standby_key(self.name), self.value)
            await supervise.pause(stop, self.seconds / BEATS)
            if stop.is_set():
                return False
        with contextlib.suppress(KeyNotFoundError):
            await kv.delete(standby_key(self.name))
        self.log.info("projector_active", seconds=self.seconds)
        return True

    async def _seized(self, kv) -> bool:
        """Create the key, or replace a revision its holder left unrenewed for its term."""
        try:
            self.revision = await kv.create(ACTIVE, self.value)
            return True
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            pass
        try:
            entry = await kv.get(ACTIVE)
        except KeyNotFoundError:  # released meanwhile: create again on the next beat
            return False
        holder = _holder(entry.value, self.seconds)
        if self.sightings.fresh(ACTIVE, entry.revision, holder.seconds):
            return False
        try:
            self.revision = await kv.update(ACTIVE, self.value, last=entry.revision)
        except KeyWrongLastSequenceError:  # renewed, or taken by another standby, meanwhile
            return False
        self.log.warning("projector_took_over", previous=holder.name)
        return True

    async def _keep(self, kv, stop: asyncio.Event, halt: asyncio.Event) -> None:
        """Renew on a beat until `stop`; set `halt` then, or once fenced: FENCE of the term
        after the last renewal was sent unanswered, or on finding the lease taken."""
        loop = asyncio.get_running_loop()
        fence_at = loop.time() + self.seconds * FENCE
        while not stop.is_set() and not halt.is_set():
            await supervise.pause(stop, max(0.0, min(self.seconds / BEATS, fence_at - loop.time())))
            sent, left = loop.time(), fence_at - loop.time()
            if stop.is_set():
                break
            if left <= 0:
                self.log.warning("projector_fenced", seconds=self.seconds * FENCE)
                break
            try:
                self.revision = await asyncio.wait_for(
                    kv.update(ACTIVE, self.value, last=self.revision), left
                )
                fence_at = sent + self.seconds * FENCE
            except KeyWrongLastSequenceError:
                self.log.warning("projector_lease_taken_over")
                break
            except Exception as exc:  # noqa: BLE001 - NATS away: the fence decides
                self.log.warning("projector_lease_renewal_failed", error=repr(exc))
        halt.set()

    async def _leave(self, kv) -> None:
        """Give the lease up if still ours, so a standby or the next start takes it at once."""
        revision, self.revision = self.revision, None
        with contextlib.suppress(Exception):
            await kv.delete(standby_key(self.name))
            if revision is not None:
                await kv.delete(ACTIVE, last=revision)

"""Admission: a build or a retry starts only holding its environment, a team slot and a run slot.

Everything is a key of DBT_LEASES, taken with `create` (only one taker wins), renewed on
the lease's beat and lost with its runner (the bucket's TTL):

    env-<hash>              the environment (lease.lease_key): one build at a time
    team-<hash>.<i>         one of MAX_RUNS_PER_TEAM slots of a team
    slot.<i>                one of MAX_CONCURRENT_RUNS run slots, across every runner; a
                            runner takes at most MAX_RUNS_PER_RUNNER (runner_share.py)
    queued.team-<hash>.<i>  one of MAX_QUEUED_RUNS_PER_TEAM places in a team's queue
                            (queue_cap.py): a run holds one from before it is prepared
                            until it starts
    wait.env-<hash>.<seq>   a run waiting for that environment (seq: its command's)
    wait.team-<hash>.<seq>  a run waiting in that team's queue; written before the run
                            is prepared, when its environment is not known yet
    last.env-<hash>         the team that held the environment last (fair_share.py)

A waiting run holds no slot: it keeps its wait entries alive and may try to take only
when it heads its team's queue (no run of its team submitted before it waits), so a team's
runs start in the order they were submitted, whichever runner holds them. A run announces
itself in its team's queue (`announce`) before it is prepared, so one of its team submitted
after it cannot start first while it still reads its descriptor; runs of other teams are
not held back by it. Across teams, fair_share.py says whose turn it is: on an environment
teams take turns (`last.env-<hash>`: the team that had it last, for the TTL), and a free
run slot goes to the team holding the fewest slots, then to the run submitted first.
Deploys and parses come in the same way, each with a scope of its own, so they take a team
slot and a run slot too. Each runner follows the bucket with one watcher (`Mirror`);
waiting runs read it and wake when a key changes, instead of each asking the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import msgspec
import nats.errors
from jetdbt.services.runner.admission import fair_share
from jetdbt.services.runner.admission.lease import Lease, LeaseBusy, lease_key
from jetdbt.services.runner.admission.runner_share import RunnerShare
from jetdbt.shared.bus.connection import TRANSIENT, Bus
from jetdbt.shared.bus.streams import LEASES
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise

__all__ = ["Admission", "Blocked", "Mirror", "mirrored", "mirror_of", "team_key"]

RETRY_EVERY = 0.75  # seconds between a waiting run's looks at the queue, with no change seen
RESYNC = 30.0  # seconds after which a runner's copy of the bucket is read afresh
SEQ_DIGITS = 16  # wait entries sort by their zero-padded command sequence
# A new place in the queue alone is told at most this often (a new reason at once): every
# start moves every waiter behind it, and n waiters would otherwise say so n times each.
PLACE_EVERY = 2.0


def team_key(team: str) -> str:
    """A KV key for a team's slots (any text becomes a valid key)."""
    return "team-" + hashlib.sha256(team.encode()).hexdigest()[:40]


class Blocked(NamedTuple):
    """Why a run waits, as the run's record says it, and its place in its queues (1: next)."""

    reason: str
    position: int


class Mirror:
    """This runner's copy of DBT_LEASES, fed by one watcher. An entry counts until the
    bucket's TTL after it was written: an expiry is not announced to watchers."""

    def __init__(self, bus: Bus):
        self.bus = bus
        self.ttl = 0.0
        self.ready = asyncio.Event()
        self._entries: dict[str, tuple[dict, datetime]] = {}
        self._changed = asyncio.Event()

    async def follow(self, stop: asyncio.Event) -> None:
        """Keep the copy until `stop`. A fresh watcher every RESYNC seconds starts over, so
        a watcher that went quiet (NATS away) never leaves the copy stale for long."""
        kv = await self.bus.js.key_value(LEASES)
        self.ttl = (await kv.status()).ttl or 0.0
        watcher = await kv.watchall()
        loop = asyncio.get_running_loop()
        until = loop.time() + RESYNC
        fresh: dict[str, tuple[dict, datetime]] | None = {}
        try:
            while not stop.is_set() and loop.time() < until:
                try:
                    entry = await watcher.updates(timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                if entry is None:  # the snapshot is complete: it replaces the old copy
                    self._entries, fresh = fresh, None
                    self.ready.set()
                    self._wake()
                    continue
                into = fresh if fresh is not None else self._entries
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    into.pop(entry.key, None)
                else:
                    try:
                        value = msgspec.json.decode(entry.value)
                    except msgspec.DecodeError:
                        value = {}
                    into[entry.key] = (value if isinstance(value, dict) else {}, entry.created)
                if fresh is None:
                    self._wake()
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def snapshot(self) -> dict[str, dict]:
        """Every key that has not expired, with its value."""
        return self.live("")

    async def changed(self, timeout: float) -> None:
        """Return when a key changes, or after `timeout`."""
        await supervise.pause(self._changed, timeout)

    def live(self, prefix: str) -> dict[str, dict]:
        """Keys starting with `prefix` that have not expired, with their values."""
        oldest = datetime.now(UTC) - timedelta(seconds=self.ttl or 1e9)
        return {
            k: v for k, (v, at) in self._entries.items() if k.startswith(prefix) and at > oldest
        }


_MIRRORS: weakref.WeakKeyDictionary[Bus, Mirror] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def mirrored(bus: Bus, log):
    """Follow DBT_LEASES for the attempts of the runner on `bus` while the block runs."""
    mirror = Mirror(bus)
    stop = asyncio.Event()
    task = asyncio.create_task(supervise.forever(mirror.follow, stop, log, "lease_mirror_failed"))
    _MIRRORS[bus] = mirror
    try:
        yield mirror
    finally:
        stop.set()
        _MIRRORS.pop(bus, None)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def mirror_of(bus: Bus) -> Mirror:
    """The copy of DBT_LEASES the runner on `bus` follows."""
    mirror = _MIRRORS.get(bus)
    if mirror is None:
        raise RuntimeError("no runner follows DBT_LEASES on this connection")
    return mirror


async def _first(*waits: Awaitable) -> None:
    """Until the first of `waits` (each waits on this process alone, no request) ends."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _waiting_seq(key: str) -> int:
    return int(key.rsplit(".", 1)[1])


def _team_waiting_key(team: str, seq: int) -> str:
    return f"wait.{team_key(team)}.{seq:0{SEQ_DIGITS}d}"


async def announce(bus: Bus, seq: int, team: str, holder: dict) -> None:
    """Say that the command `seq` waits in `team`'s queue, before its environment is known."""
    kv = await bus.js.key_value(LEASES)
    await kv.put(_team_waiting_key(team, seq), msgspec.json.encode({**holder, "team": team}))


async def withdraw(bus: Bus, seq: int, team: str) -> None:
    """The command `seq` no longer waits in `team`'s queue (it started, or never will)."""
    with contextlib.suppress(Exception):
        kv = await bus.js.key_value(LEASES)
        await kv.delete(_team_waiting_key(team, seq))


class _EnvironmentLease(Lease):
    """An environment's lease that, given up, first says which team had it
    (fair_share.last_key, for the bucket's TTL): the next turn goes to another team."""

    async def release(self) -> None:
        if self.revision is not None:
            with contextlib.suppress(Exception):
                kv = await self._bucket()
                team = {"team_key": team_key(msgspec.json.decode(self.value).get("team", ""))}
                await kv.put(fair_share.last_key(self.key), msgspec.json.encode(team))
        await super().release()


class _RunSlot(Lease):
    """A run slot that, given up, gives its runner's share back too (once)."""

    def __init__(self, *args, share: RunnerShare):
        super().__init__(*args)
        self.share: RunnerShare | None = share

    async def release(self) -> None:
        """The share first: it is this process's own count, and its run has ended. Deleting
        the key from a runner cut off from NATS waits out request timeouts (about 25 s),
        and the runner need not hold its share that long; the shared slot is the key's."""
        if self.share is not None:
            self.share.free()
            self.share = None
        await super().release()


class Admission:
    """One attempt's way in: wait in order, then take every key or none. Made before the
    run is prepared, it knows only the run's team queue; `place` names the environment
    once the plan does."""

    def __init__(
        self,
        bus: Bus,
        *,
        team: str,
        seq: int,
        holder: dict,
        runs: int,
        per_team: int,
        environment: str | None = None,
        share: RunnerShare | None = None,
    ):
        self.bus, self.mirror = bus, mirror_of(bus)
        self.team, self.seq = team, seq
        self.runs, self.per_team = runs, per_team
        self.share = share or RunnerShare(0)
        self.team_key = team_key(team)
        self.environment: str | None = None
        self.holder = {**holder, "team": team, "seq": seq}
        self.log = jlog.get("admission", team=team, **holder)
        self._said: Blocked | None = None  # what it told last, and when
        self._said_at = 0.0
        if environment is not None:
            self.place(environment)

    def place(self, environment: str) -> None:
        """The environment the run builds in: from now on it waits for it too."""
        self.environment = environment
        self.env_key = lease_key(environment)
        # "env" tells every runner's fair_share which environment this run waits for.
        self.holder = {**self.holder, "env": self.env_key}
        self._wait_keys = [
            f"wait.{self.env_key}.{self.seq:0{SEQ_DIGITS}d}",
            _team_waiting_key(self.team, self.seq),
        ]
        self.log = self.log.bind(environment=environment)

    def telling(self, on_blocked: Callable[[Blocked], Awaitable[None]]):
        """While the block prepares or checks the run (a selection resolved by dbt may take
        seconds), `on_blocked` hears each new reason it will have to wait for."""
        return supervise.alongside(lambda stop: self._tell_while(on_blocked, stop))

    async def _tell_while(
        self, on_blocked: Callable[[Blocked], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        """Tell news until `stop`, taking nothing: the run is not ready to start."""
        await self.mirror.ready.wait()
        while not stop.is_set():
            await self._tell(self.blocked(), on_blocked)
            await _first(self.mirror.changed(RETRY_EVERY), stop.wait())

    async def enter(
        self,
        cancelled: asyncio.Event,
        on_blocked: Callable[[Blocked], Awaitable[None]],
    ) -> list[Lease] | None:
        """The leases this attempt holds from now on, or None when it was cancelled while
        it waited. `on_blocked` hears each new reason or place while it waits. Raises
        RunnerFull when its turn comes while this runner builds its share."""
        await _first(self.mirror.ready.wait(), cancelled.wait())
        loop = asyncio.get_running_loop()
        renew_at = None  # when the wait entries are written again; None: not written yet
        try:
            while not cancelled.is_set():
                blocked = self.blocked()
                try:
                    if blocked is None and (taken := await self._take()) is not None:
                        return taken
                    if renew_at is None or loop.time() >= renew_at:
                        await self._write_waiting()
                        renew_at = loop.time() + (self.mirror.ttl or 60) / 4
                except TRANSIENT as exc:  # NATS away a moment: the run goes on waiting
                    self.log.warning("admission_retried", error=repr(exc))
                await self._tell(blocked, on_blocked)
                await _first(self.mirror.changed(RETRY_EVERY), cancelled.wait())
            return None
        finally:
            await self._forget_waiting()  # its team's entry too, written when it was announced

    async def _tell(
        self, blocked: Blocked | None, on_blocked: Callable[[Blocked], Awaitable[None]]
    ) -> None:
        """Tell `blocked` when it is news: a new reason at once, a new place not told in the
        last PLACE_EVERY seconds."""
        now = asyncio.get_running_loop().time()
        said = self._said
        if blocked is None or (
            said is not None
            and blocked.reason == said.reason
            and (blocked.position == said.position or now - self._said_at < PLACE_EVERY)
        ):
            return
        self.log.info("run_queued", reason=blocked.reason, position=blocked.position)
        await on_blocked(blocked)
        self._said, self._said_at = blocked, now

    def blocked(self) -> Blocked | None:
        """Why this run may not try to take its keys now, from the mirror; None: it may.
        Before its environment is known, only its team's queue can hold it back."""
        m = self.mirror
        team_ahead = {
            s: v
            for k, v in m.live(f"wait.{self.team_key}.").items()
            if (s := _waiting_seq(k)) < self.seq
        }
        if self.environment is None:
            return self._behind(team_ahead, len(team_ahead) + 1) if team_ahead else None
        env_ahead = {
            s: v
            for k, v in m.live(f"wait.{self.env_key}.").items()
            if (s := _waiting_seq(k)) < self.seq
        }
        position = len(env_ahead.keys() | team_ahead.keys()) + 1
        on = f"on environment {self.environment}"
        holder = m.live(self.env_key).get(self.env_key)
        if holder is not None:
            return Blocked(f"waiting for run {holder.get('run_id')!r} {on}", position)
        queues = fair_share.Queues(m.snapshot(), self.per_team)
        held = queues.held[self.team_key]
        if held >= self.per_team:
            return Blocked(f"team {self.team} has {held} of {self.per_team} runs", position)
        if team_ahead:
            return self._behind(team_ahead, position)
        me = fair_share.Contender(
            held, self.seq, self.team_key, str(self.holder.get("run_id", "")), self.team,
            self.env_key,
        )  # fmt: skip
        turn = queues.env_turn(self.env_key, me)
        if turn != me:
            return Blocked(
                f"waiting for run {turn.run_id!r} of team {turn.team}, whose turn {on} comes"
                " first (teams take an environment in turns)",
                position,
            )
        free = queues.free_slots(self.runs)
        if free <= 0:
            return Blocked(f"all {self.runs} run slots are taken", position)
        order = queues.ranked(me)
        place = order.index(me)
        if place >= free:
            first = order[0]
            return Blocked(
                f"waiting for run {first.run_id!r} of team {first.team} to take a free run"
                " slot first (the team holding the fewest slots goes first, then the run"
                " submitted first)",
                position + place,
            )
        return None

    def _behind(self, team_ahead: dict[int, dict], position: int) -> Blocked:
        """Waiting for the first run of its team submitted before it."""
        first = team_ahead[min(team_ahead)]
        said = "queued before it" if "env" in first else "submitted before it"
        end = "" if "env" in first else ", to start"
        return Blocked(
            f"waiting for run {first.get('run_id')!r}, {said} in team {self.team}{end}", position
        )

    async def _take(self) -> list[Lease] | None:
        """Every key or none: a place in this runner's share, the environment, then a team
        slot, then a run slot (which gives the place back when it is released)."""
        self.share.reserve()
        taken: list[Lease] = []
        slot = functools.partial(_RunSlot, share=self.share)
        try:
            env = _EnvironmentLease(
                self.bus, self.env_key, f"environment {self.environment}", self.holder
            )
            await env.take()
            taken.append(env)
            for keys, what, kind in (
                (
                    [f"{self.team_key}.{i}" for i in range(self.per_team)],
                    f"team {self.team}",
                    Lease,
                ),
                ([f"slot.{i}" for i in range(self.runs)], "a run slot", slot),
            ):
                taken.append(await self._one_of(keys, what, kind))
        except LeaseBusy as exc:
            self.log.info("admission_raced", reason=str(exc))
            for lease in taken:
                await lease.release()
            self.share.free()
            return None
        except BaseException:
            for lease in taken:
                await lease.release()
            self.share.free()
            raise
        return taken

    async def _one_of(self, keys: list[str], what: str, kind) -> Lease:
        """The first of `keys` this attempt can create (a `kind` of lease), trying those the
        mirror shows free first; LeaseBusy when every one is held."""
        held = self.mirror.live(keys[0].rsplit(".", 1)[0] + ".")
        for key in sorted(keys, key=lambda k: k in held):
            lease = kind(self.bus, key, what, self.holder)
            with contextlib.suppress(LeaseBusy):
                await lease.take()
                return lease
        raise LeaseBusy({}, what)

    async def _write_waiting(self) -> None:
        kv = await self.bus.js.key_value(LEASES)
        value = msgspec.json.encode(self.holder)
        for key in self._wait_keys:
            await kv.put(key, value)

    async def _forget_waiting(self) -> None:
        with contextlib.suppress(Exception):
            kv = await self.bus.js.key_value(LEASES)
            for key in self._wait_keys:
                await kv.delete(key)


@contextlib.asynccontextmanager
async def admitted(ctx, *, scope: str, team: str, seq: int, holder: dict):
    """Hold `scope`, a team slot and a run slot while the block runs (a deploy's dbt): its
    place is only logged while it waits, and a lease lost meanwhile ends nothing."""
    settings = ctx.settings
    entry = Admission(
        ctx.bus,
        environment=scope,
        team=team,
        seq=seq,
        holder=holder,
        runs=settings.max_concurrent_runs,
        per_team=settings.max_runs_per_team,
        share=ctx.share,
    )

    async def said(blocked: Blocked) -> None:
        """`enter` logs each new reason and place already: a deploy publishes none."""

    leases = await entry.enter(asyncio.Event(), said)
    lost = asyncio.Event()
    keepers = [asyncio.create_task(lease.keep(lost)) for lease in leases]
    try:
        yield
    finally:
        for keeper in keepers:
            keeper.cancel()
        for lease in leases:
            await lease.release()

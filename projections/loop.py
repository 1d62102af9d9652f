"""The checkpointed projector loop shared by every fold.

Fetch a batch, decode, apply, write the checkpoint in the same transaction as
the rows, commit, then ack. The Postgres checkpoint is the position: each start
opens a consumer at checkpoint + 1, so a crash between commit and ack costs a
skip, never a double apply. Each batch locks its checkpoint row before reading it,
so two processes folding one projection at once (a fenced projector's last batch
committing after its successor's first: projections/active.py) apply each event
once. An event that cannot be decoded, or that the fold or Postgres refuses as data,
goes to the dead-letter table with its bytes and error, and the projection moves on. Any
other error is a bug in the fold, not in the event: the projection stops at that event
(its checkpoint row says why, /healthz and /v1/projections show it) and tries again
until the fold is fixed, while the other projections go on.

A fold's consumer filters on one subject covering its patterns (JetStream serves
one filter far faster than several); messages outside the patterns only move the
checkpoint, with the fold's next batch or once the projector is idle or stopping.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import asyncpg
import msgspec
from jetdbt.shared.bus import events
from jetdbt.shared.bus.connection import BlobUnreadable, Bus
from jetdbt.shared.bus.outages import outage
from jetdbt.shared.bus.stream_batches import pending, stream_seq
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.bus.subjects import SubjectFilter, covering
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from jetdbt.shared.wording.short_quote import storable
from nats.js import api

__all__ = ["Fold", "Projector", "POISON", "apply_many", "checkpoint", "dead_letter"]

# Errors that say "this event cannot be applied", as opposed to "Postgres is away" or "the
# fold has a bug": a ValueError, TypeError or KeyError raised by a fold's code is the fold's.
# Postgres refuses data as a data exception (class 22), a constraint (23) or a limit (54: a
# key too long for its index); a date the event carries can overflow the fold's arithmetic.
POISON = (
    msgspec.DecodeError,
    msgspec.ValidationError,
    UnicodeDecodeError,
    BlobUnreadable,
    OverflowError,
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
    asyncpg.ProgramLimitExceededError,
)


class Fold(Protocol):
    """A projection: folds decoded events, each with its stream sequence, into its tables.

    The loop hands each batch to `apply_many`, in stream order, inside the transaction
    that then writes the checkpoint; a batch that fails on a poison event is applied
    again through `apply`, one event under a savepoint at a time, and dead-letter
    retries use `apply` too. A fold with a batch path of its own (fewer round trips:
    progress) defines `apply_many`; one that folds event by event defines only `apply`
    and gets the default below, by subclassing Fold or through `apply_many(fold, ...)`.
    Either way, applying the same events again must leave the same rows.
    """

    name: str

    async def apply(self, conn: asyncpg.Connection, event: events.Event, seq: int) -> None: ...

    async def apply_many(
        self, conn: asyncpg.Connection, items: list[tuple[events.Event, int]]
    ) -> None:
        """Fold (event, stream sequence) pairs in order; by default one at a time."""
        for event, seq in items:
            await self.apply(conn, event, seq)


async def apply_many(fold: Fold, conn, items: list[tuple[events.Event, int]]) -> None:
    """Fold a batch with the fold's own `apply_many`, or with Fold's default when the fold
    has only `apply` (the folds do not subclass Fold: a Protocol is matched by shape)."""
    await getattr(type(fold), "apply_many", Fold.apply_many)(fold, conn, items)


async def checkpoint(conn, projector: str, lock: bool = False) -> int:
    """The projection's last applied sequence. With `lock`, its row stays locked until the
    transaction ends: another process's batch waits, then reads what this one wrote."""
    sql = "SELECT last_seq FROM checkpoints WHERE projector = $1"
    value = await conn.fetchval(sql + (" FOR UPDATE" if lock else ""), projector)
    return value or 0


async def dead_letter(
    conn, projector: str, seq: int, subject: str, data: bytes, error: str
) -> None:
    await conn.execute(
        "INSERT INTO dead_letters (projector, stream_seq, subject, data, error)"
        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (projector, stream_seq) DO UPDATE"
        " SET error = EXCLUDED.error, failed_at = now()",
        projector,
        seq,
        subject,
        data,
        storable(error),
    )


# The position, and why the projection is stopped there (a fold's bug) or None. A mark is
# kept, with its first time, while the projection stays where it is; moving on clears it.
_SAVE_CHECKPOINT = (
    "INSERT INTO checkpoints (projector, last_seq, stopped, stopped_since)"
    " VALUES ($1, $2, $3, CASE WHEN $3::text IS NULL THEN NULL ELSE now() END)"
    " ON CONFLICT (projector) DO UPDATE SET last_seq = EXCLUDED.last_seq, updated_at = now(),"
    " stopped = CASE WHEN EXCLUDED.stopped IS NOT NULL THEN EXCLUDED.stopped"
    "   WHEN EXCLUDED.last_seq > checkpoints.last_seq THEN NULL ELSE checkpoints.stopped END,"
    " stopped_since = CASE WHEN EXCLUDED.stopped IS NOT NULL"
    "   THEN coalesce(checkpoints.stopped_since, now())"
    "   WHEN EXCLUDED.last_seq > checkpoints.last_seq THEN NULL"
    "   ELSE checkpoints.stopped_since END"
)


async def _save_checkpoint(conn, projector: str, seq: int, stopped: str | None = None) -> None:
    await conn.execute(_SAVE_CHECKPOINT, projector, seq, stopped)


class FoldBug(RuntimeError):
    """The fold raised what no event can cause (its bug) on the event at `seq`."""

    def __init__(self, seq: int, exc: Exception):
        super().__init__(f"{exc.__class__.__name__}: {exc} (at event {seq})")
        self.seq = seq
        self.__cause__ = exc


# How often an idle projector checks that its last commit survived.
IDLE_CHECK_SECONDS = 2.0


class CheckpointLost(RuntimeError):
    """The stored checkpoint is behind what this projector committed: restart from it."""


class Projector:
    """Runs one fold over its filtered view of DBT_EVENTS until stopped."""

    def __init__(
        self, bus: Bus, pool: asyncpg.Pool, fold: Fold, subjects: list[str], batch: int = 256
    ):
        self.bus = bus
        self.pool = pool
        self.fold = fold
        self.subjects = subjects
        self.wants = SubjectFilter(subjects)
        self.batch = batch
        self.log = jlog.get("projector", projector=fold.name)
        self._position: int | None = None  # the checkpoint this projector last committed
        self._stopped_by: str | None = None  # the fold's bug this projector last logged

    async def _subscribe(self, after: int):
        # Unnamed: the server names it, and refuses to make it durable (readers may create
        # only ephemeral consumers on the log, which go when their reader does).
        config = api.ConsumerConfig(
            description=f"proj-{self.fold.name}",
            filter_subject=covering(self.subjects),
            ack_policy=api.AckPolicy.ALL,
            inactive_threshold=60,
            max_ack_pending=self.batch * 4,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE if after else api.DeliverPolicy.ALL,
            opt_start_seq=after + 1 if after else None,
        )
        info = await self.bus.js.add_consumer(EVENTS, config)
        return await self.bus.js.pull_subscribe_bind(info.name, stream=EVENTS)

    async def apply_batch(self, pairs, upto: int = 0) -> int:
        """Apply (stream sequence, message) `pairs`, all on this fold's subjects, in one
        transaction; returns the new checkpoint: the last of them, or `upto` when later
        (messages read past them were for other folds).

        The batch goes in first without a savepoint per event: those are two round trips
        an event, most of a replay's time. An event the fold refuses rolls that attempt
        back, and the batch is applied again with a savepoint around each event, so only
        the poison one is dead-lettered. Any other error (not an outage) is applied again
        the same way to find the event the fold's bug stops at: the events before it are
        committed with the checkpoint row saying why it stops there (read by /healthz and
        /v1/projections in any process), and FoldBug is raised.
        """
        try:
            async with self.pool.acquire() as conn:
                try:
                    done = await self._apply(conn, pairs, upto, guarded=False)
                except Exception as exc:
                    if outage(exc) is not None or isinstance(exc, CheckpointLost):
                        raise
                    done = await self._apply(conn, pairs, upto, guarded=True)
                    if not isinstance(exc, POISON):  # `apply` took what the batch path did not
                        self.log.error("fold_batch_path_failed", error=repr(exc))
        except FoldBug as bug:
            if str(bug) != self._stopped_by:  # once, with its traceback: it is tried each second
                self.log.error("projection_stopped", error=str(bug), exc_info=bug.__cause__)
                self._stopped_by = str(bug)
            raise
        if self._stopped_by is not None and pairs:
            self.log.warning("projection_resumed", after=self._stopped_by)
            self._stopped_by = None
        return done

    async def _apply(self, conn, pairs, upto: int, guarded: bool) -> int:
        name = self.fold.name
        async with conn.transaction():
            last = await checkpoint(conn, name, lock=True)
            self._check(last)
            fresh = [(seq, msg) for seq, msg in pairs if seq > last]
            if not guarded:
                decoded = [(await self._decoded(conn, msg, seq), seq) for seq, msg in fresh]
                await apply_many(self.fold, conn, [(e, seq) for e, seq in decoded if e])
            bug = None
            # In stream order, so nothing past the event a fold's bug stops at is written.
            for seq, msg in fresh if guarded else ():
                event = await self._decoded(conn, msg, seq)
                try:
                    if event is not None:
                        async with conn.transaction():
                            await self.fold.apply(conn, event, seq)
                except POISON as exc:
                    await self._dead_letter(conn, msg, seq, exc)
                except Exception as exc:
                    if outage(exc) is not None:
                        raise
                    bug = FoldBug(seq, exc)
                    break
            if bug:  # what came before it stands
                await _save_checkpoint(conn, name, bug.seq - 1, storable(str(bug)))
            else:
                last = max([last, *(seq for seq, _ in fresh), upto])
                await _save_checkpoint(conn, name, last)
        if bug:
            raise bug
        return last

    async def _decoded(self, conn, msg, seq: int) -> events.Event | None:
        """The event, or None once its bytes are dead-lettered."""
        try:
            return events.decode(msg.data)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # ValidationError too
            await self._dead_letter(conn, msg, seq, exc)
            return None

    async def _move_past(self, passed: int) -> int:
        """Write the checkpoint past other folds' events once idle (or stopping), not in a
        transaction of its own for each: a crash before it only reads them again."""
        if self._position is not None and passed > self._position:
            self._position = await self.apply_batch([], upto=passed)
        return passed

    async def _verify_position(self) -> None:
        """While idle, that the last commit is still there: a batch Postgres lost in a
        crash is otherwise only noticed when the next event arrives."""
        async with self.pool.acquire() as conn:
            self._check(await checkpoint(conn, self.fold.name))

    def _check(self, stored: int) -> None:
        """Postgres lost a commit it had acknowledged (a crash, with synchronous_commit
        off): the projector starts again from the checkpoint that is really stored."""
        if self._position is not None and stored < self._position:
            raise CheckpointLost(
                f"{self.fold.name}: the checkpoint went back from {self._position} to {stored}"
            )

    async def _dead_letter(self, conn, msg, seq: int, exc: Exception) -> None:
        error = f"{exc.__class__.__name__}: {exc}"
        self.log.warning("dead_letter", seq=seq, subject=msg.subject, error=error)
        await dead_letter(conn, self.fold.name, seq, msg.subject, msg.data, error)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Project until `stop`; a failure (Postgres or NATS away) restarts from the checkpoint."""
        await supervise.forever(
            self._run_once, stop or asyncio.Event(), self.log, "projector_failed"
        )

    async def _run_once(self, stop: asyncio.Event) -> None:
        async with self.pool.acquire() as conn:
            # A row to lock from the first batch on (a missing row locks nothing).
            await conn.execute(
                "INSERT INTO checkpoints (projector, last_seq) VALUES ($1, 0)"
                " ON CONFLICT (projector) DO NOTHING",
                self.fold.name,
            )
            after = await checkpoint(conn, self.fold.name)
        self._position = after
        sub = await supervise.unless_stopped(self._subscribe(after), stop)
        if sub is None:
            return
        self.log.info("projector_started", after=after)
        loop = asyncio.get_running_loop()
        verified = loop.time()
        passed = after  # read past: only other folds' events, not yet in the checkpoint
        try:
            while not stop.is_set():
                try:
                    # One event is folded as soon as it lands; a batch only takes what the
                    # first says is already there (a fetch of many waits for the batch or
                    # its timeout).
                    msgs = await sub.fetch(1, timeout=0.5)
                    more = min(self.batch - 1, pending(msgs[0]))
                    if more:
                        with contextlib.suppress(TimeoutError):
                            msgs += await sub.fetch(more, timeout=0.5)
                except TimeoutError:
                    passed = await self._move_past(passed)
                    if loop.time() - verified > IDLE_CHECK_SECONDS:
                        await self._verify_position()
                        verified = loop.time()
                    continue
                mine = [(stream_seq(m), m) for m in msgs if self.wants(m.subject)]
                passed = stream_seq(msgs[-1])
                if mine:
                    try:
                        self._position = await self.apply_batch(mine, upto=passed)
                    except FoldBug:  # said once; tried again from the checkpoint, quietly
                        await supervise.pause(stop, supervise.RETRY_SECONDS)
                        return
                await msgs[-1].ack()
            await self._move_past(passed)
        finally:
            # The connection may be gone already; the consumer expires on its own.
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

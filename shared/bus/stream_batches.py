"""Reading a stretch of a stream in order, fast, in batches.

Replay, audit and export read up to millions of messages. A pull `fetch` in
nats-py costs a timer and a task per message; an ordered push consumer hands
each message to a callback instead, and its flow control stops the server when
the reader falls behind, so memory stays bounded by the batches in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

from nats.js import api
from nats.js.errors import NotFoundError

__all__ = ["Slice", "last_seq", "last_matching", "pending", "seq_at", "stream_seq"]


def stream_seq(msg) -> int:
    """A delivered message's stream sequence, read from its ack subject.

    `msg.metadata` parses every field and builds objects (~10 us, more than decoding
    the event); replay and projection need only this one, for every message. The
    subject is `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>...` (9 tokens) or, with
    a domain and account hash before the stream, 12 tokens.
    """
    tokens = msg.reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5])
    if len(tokens) >= 11:
        return int(tokens[7])
    return msg.metadata.sequence.stream


def pending(msg) -> int:
    """How many messages the consumer had left to deliver after this one, from the same
    ack subject (its 9th token, or its 11th with a domain)."""
    tokens = msg.reply.split(".")
    if len(tokens) == 9:
        return int(tokens[8])
    if len(tokens) >= 11:
        return int(tokens[10])
    return msg.metadata.num_pending


async def last_seq(js, stream: str) -> int:
    return (await js.stream_info(stream)).state.last_seq


async def last_matching(js, stream: str, subject: str) -> int:
    """The newest sequence on `subject` (wildcards allowed), 0 when there is none."""
    with contextlib.suppress(NotFoundError):
        return (await js.get_last_msg(stream, subject)).seq
    return 0


async def seq_at(js, stream: str, when: datetime) -> int:
    """The last sequence stored before `when` (0 if none): a binary search over stored times,
    so a time window costs a few dozen look-ups however long the stream is."""
    state = (await js.stream_info(stream)).state
    lo, hi = state.first_seq, state.last_seq
    if hi == 0 or lo > hi:
        return 0
    found = lo - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            msg = await js.get_msg(stream, seq=mid, next=True)
        except NotFoundError:
            hi = mid - 1
            continue
        if msg.time < when:
            found = msg.seq
            lo = msg.seq + 1
        else:
            hi = mid - 1
    return found


class Slice:
    """The messages on `subject` with `after` < seq <= `until`, as lists of at most `batch`
    (stream sequence, message) pairs.

    One filter subject, never several: JetStream delivers a multi-filter consumer about
    ten times slower on a log of many run subjects, so a reader of several patterns
    reads `subjects.covering()` of them and filters. `until` defaults to the stream's
    last sequence when reading starts, so a reader of a live stream ends instead of
    following it. Use as `async with` and iterate.
    """

    def __init__(
        self,
        js,
        stream: str,
        subject: str,
        *,
        after: int = 0,
        until: int | None = None,
        batch: int = 1000,
        depth: int = 4,
    ):
        self.js = js
        self.stream = stream
        self.subject = subject
        self.after = after
        self.until = until
        self.batch = batch
        self._queue: asyncio.Queue = asyncio.Queue(depth)
        self._pending: list = []
        self._target = 0
        self._done = False
        self._sub = None

    async def __aenter__(self) -> Slice:
        newest = await last_matching(self.js, self.stream, self.subject)
        if self.until is None:
            self.until = await last_seq(self.js, self.stream)
        # A message at `_target` exists and is the last one wanted, so reading stops on
        # it; when `until` falls between matching messages, on the first one past it.
        self._target = min(self.until, newest)
        if self._target <= self.after:
            self._done = True
            self._queue.put_nowait(None)
            return self
        config = api.ConsumerConfig(
            filter_subject=self.subject,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.after + 1,
            mem_storage=True,
        )
        self._sub = await self.js.subscribe(
            self.subject,
            stream=self.stream,
            cb=self._on_msg,
            ordered_consumer=True,
            config=config,
            inactive_threshold=30,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _on_msg(self, msg) -> None:
        if self._done:
            return
        seq = stream_seq(msg)
        if seq <= self.until:
            self._pending.append((seq, msg))
        if seq >= self._target:
            self._done = True
            if self._pending:
                await self._queue.put(self._pending)
            await self._queue.put(None)
        elif len(self._pending) >= self.batch:
            batch, self._pending = self._pending, []
            await self._queue.put(batch)

    async def __aiter__(self):
        while True:
            batch = await self._queue.get()
            if batch is None:
                return
            yield batch

"""A run's human-readable log, read the same way by the API and the CLI.

While a run goes, its lines are the messages on its DBT_LOGS subject: line n is the
n-th one. When it ends, the runner keeps the whole log as one object named for the
run (`object_name`), one JSON string per line, so a line holding any character keeps
its number; `run.log_kept` says so. A reader takes the lines from DBT_LOGS while all
of them are there and from the object after (the stream forgets after 7 days);
retention may later remove both (`run.pruned`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.stream_batches import Slice
from jetdbt.shared.bus.streams import BLOBS, EVENTS, LOGS
from jetdbt.shared.runs import run_status
from nats.js import api
from nats.js.errors import NotFoundError, ObjectNotFoundError

__all__ = [
    "Line",
    "RunLog",
    "LogGone",
    "object_name",
    "encode",
    "decode",
    "find",
]

# After the run's end, a follower waits this long for a line the log says is coming:
# a line the stream dropped (its byte limit) must not hold a follower forever.
DRAIN_SECONDS = 5.0
_CHUNK = 1000  # lines read at a time when a follower catches up on an ended run


class Line(msgspec.Struct, frozen=True):
    """Line `line` (counted from 1) of a run's log."""

    line: int
    text: str


class LogGone(LookupError):
    """The run's log is gone (retention removed it); its status and results are still in
    the API."""


def object_name(run_id: str) -> str:
    """The kept log's object: named for the run, never content-addressed, never shared."""
    return f"log/{subjects.check_run_id(run_id)}"


def encode(lines: list[str]) -> bytes:
    """One JSON string per line (NDJSON), so a line's own newline cannot renumber the rest."""
    return b"".join(msgspec.json.encode(text) + b"\n" for text in lines)


def decode(data: bytes) -> list[str]:
    return [msgspec.json.decode(row) for row in data.splitlines() if row]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class RunLog:
    """What the event log says about one run's log: whose it is, whether it was kept or
    pruned, and how the run ended (None while it goes)."""

    def __init__(self, bus: Bus, project: str, run_id: str, events: list[ev.Event]):
        self.bus, self.project, self.run_id = bus, project, run_id
        self.subject = subjects.run_log(run_id)
        self.kept: ev.RunLogKept | None = None
        self.pruned: ev.RunPruned | None = None
        self.final: ev.Event | None = None
        for e in events:
            self._note(e)

    def _note(self, e: ev.Event) -> None:
        if isinstance(e, ev.RunLogKept) and (self.kept is None or e.lines >= self.kept.lines):
            self.kept = e
        elif isinstance(e, ev.RunPruned):
            self.pruned = e
        elif isinstance(e, ev.RUN_ENDS):
            self.final = e

    @property
    def status(self) -> str | None:
        """How the run ended (shared/runs/run_status.py), or None while it goes."""
        return run_status.ended_as(self.final) if self.final is not None else None

    async def _on_stream(self) -> int:
        """How many of the run's lines DBT_LOGS holds now."""
        info = await self.bus.js.stream_info(LOGS, subjects_filter=self.subject)
        return (info.state.subjects or {}).get(self.subject, 0)

    async def _from_object(self) -> list[str]:
        store = await self.bus.js.object_store(BLOBS)
        try:
            return decode((await store.get(self.kept.object)).data)
        except ObjectNotFoundError:
            raise LogGone(
                f"the kept log of run {self.run_id!r} ({self.kept.object}) is missing from"
                f" {BLOBS}, and {LOGS} no longer holds all of its lines"
            ) from None

    async def page(self, after: int, limit: int) -> tuple[list[Line], str]:
        """Up to `limit + 1` lines after line `after` (one more tells whether there is a
        next page), and where they came from: "stream" or "object"."""
        if self.pruned is not None:
            raise LogGone(
                f"the log of run {self.run_id!r} was removed by retention (only the newest"
                " RUN_RETENTION finished runs of an environment keep their files); its status"
                " and results are still in the API"
            )
        if self.kept is not None and await self._on_stream() < self.kept.lines:
            rows = (await self._from_object())[after : after + limit + 1]
            return [Line(after + 1 + i, text) for i, text in enumerate(rows)], "object"
        return await self._stream_page(after, limit + 1), "stream"

    async def _stream_page(self, after: int, count: int) -> list[Line]:
        out: list[Line] = []
        number = 0
        async with Slice(self.bus.js, LOGS, self.subject, batch=min(after + count, 1000)) as s:
            async for batch in s:
                for _, msg in batch:
                    number += 1
                    if number > after:
                        out.append(Line(number, _text(msg.data)))
                if len(out) >= count:
                    break
        return out[:count]

    async def lines(self, after: int = 0) -> AsyncIterator[Line]:
        """Every line after `after` there is now, a page at a time."""
        while True:
            found, _ = await self.page(after, _CHUNK)
            for line in found[:_CHUNK]:
                yield line
            if len(found) <= _CHUNK:
                return
            after = found[_CHUNK - 1].line

    async def follow(self, after: int = 0, tick: float = 15.0) -> AsyncIterator[Line | None]:
        """Every line after `after` as it is written, until the run has ended and its last
        line was given; None after `tick` quiet seconds (a keepalive). `status` says how
        the run ended once this stops. A run that has ended is paged from where it is."""
        if self.final is not None:
            async for line in self.lines(after):
                yield line
            return
        # Bounded: a callback that waits holds its consumer back (JetStream flow control),
        # so a slow reader of a long log never holds the log in memory.
        queue: asyncio.Queue = asyncio.Queue(_CHUNK)

        async def on_line(msg) -> None:
            await queue.put(("line", msg.data))

        async def on_event(msg) -> None:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                await queue.put(("event", ev.decode(msg.data)))

        subs = [
            await self.bus.js.subscribe(
                subject,
                stream=stream,
                cb=cb,
                ordered_consumer=True,
                # One config each: subscribing fills in the consumer's own subjects.
                config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL, mem_storage=True),
                inactive_threshold=30,
            )
            for subject, stream, cb in (
                (self.subject, LOGS, on_line),
                (subjects.run_event(self.project, self.run_id, "*"), EVENTS, on_event),
            )
        ]
        number, expected = 0, None
        try:
            while expected is None or number < expected:
                wait = tick if self.final is None else DRAIN_SECONDS
                try:
                    kind, item = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    if self.final is not None:
                        return  # the lines it said were coming are not on the stream
                    yield None
                    continue
                if kind == "line":
                    number += 1
                    if number > after:
                        yield Line(number, _text(item))
                    continue
                self._note(item)
                if self.final is not None and expected is None:
                    expected = self.kept.lines if self.kept else await self._on_stream()
        finally:
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()


async def find(bus: Bus, run_id: str) -> RunLog | None:
    """The log of run `run_id` (any project: run ids are unique), or None when the event log
    has no event of that run. Raises subjects.InvalidName for a malformed run id."""
    subjects.check_run_id(run_id)
    try:
        # The run's own family only: another family's subject (a retry state's principal)
        # may hold the same word where a run's subject holds its id.
        newest = await bus.js.get_last_msg(EVENTS, subjects.run_event_of_any_project(run_id, "*"))
    except NotFoundError:
        return None
    project = subjects.subject_key(newest.subject)
    found: list[ev.Event] = []
    async with Slice(bus.js, EVENTS, subjects.run_event(project, run_id, "*")) as run_events:
        async for batch in run_events:
            for _, msg in batch:
                with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                    found.append(ev.decode(msg.data))
    return RunLog(bus, project, run_id, found)

"""The recorded real event log (tests/support/record_log.py wrote it), republished into a
test's stack.

Tests of projections, replay, audit and the API that need real events but not dbt
itself use it: the same subjects, headers and data, at the same stream sequences,
and the blobs the events name in the object store, with no runner behind the stack
(a command in the log is history, not work). Bind the fixture in a test module:

    recorded_stack = recorded_log.recorded_stack  # a fixture
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gzip
from typing import Any

import msgspec
import pytest
from jetdbt.projections import lag
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import contract
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.bus.subjects import SubjectFilter

from tests.support.helpers import wait_for
from tests.support.record_log import PATH

__all__ = [
    "Message",
    "Recording",
    "recording",
    "publish",
    "put_blobs",
    "republish",
    "settled",
    "recorded",
    "recorded_stack",
]


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One stored message, as the projector loop reads one: `subject` and `data`."""

    stream: str
    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


class Recording(msgspec.Struct, frozen=True, kw_only=True):
    meta: dict[str, Any]  # the project, the deploy, and the run ids by what each run did
    blobs: dict[str, bytes]  # digest -> bytes
    messages: list[Message]  # DBT_COMMANDS, then DBT_EVENTS, each in stream order

    @property
    def runs(self) -> dict[str, str]:
        """Run ids by role: passed, failed, retried, refused, malformed."""
        return self.meta["runs"]

    @property
    def events(self) -> list[Message]:
        return [m for m in self.messages if m.stream == EVENTS]

    def on(self, patterns: list[str]) -> list[Message]:
        """The events on `patterns`, as one projection's consumer sees them."""
        wanted = SubjectFilter(patterns)
        return [m for m in self.events if wanted(m.subject)]

    def decoded(self, patterns: list[str]) -> list[tuple[ev.Event, int]]:
        """(event, stream sequence) for the events on `patterns`, as a fold is given them."""
        return [(ev.decode(m.data), m.seq) for m in self.on(patterns)]


@functools.cache
def recording() -> Recording:
    meta: dict[str, Any] = {}
    blobs: dict[str, bytes] = {}
    messages: list[Message] = []
    for line in gzip.decompress(PATH.read_bytes()).splitlines():
        doc = msgspec.json.decode(line)
        kind = doc.pop("kind")
        if kind == "meta":
            meta = doc
        elif kind == "blob":
            blobs[doc["digest"]] = base64.b64decode(doc["data"])
        else:
            messages.append(Message(**{**doc, "data": doc["data"].encode()}))
    return Recording(meta=meta, blobs=blobs, messages=messages)


async def publish(bus: Bus, messages: list[Message]) -> list[int]:
    """Publish `messages` in order, headers and all; returns the sequences they were stored at."""
    seqs = []
    for m in messages:
        ack = await bus.js.publish(m.subject, m.data, stream=m.stream, headers=m.headers or None)
        seqs.append(ack.seq)
    return seqs


async def put_blobs(bus: Bus, rec: Recording) -> None:
    for digest, data in rec.blobs.items():
        assert await bus.put_blob(data) == digest


async def republish(bus: Bus, rec: Recording) -> None:
    """Blobs first (a fold reads them), then every message at its recorded sequence."""
    await put_blobs(bus, rec)
    seqs = await publish(bus, rec.messages)
    assert seqs == [m.seq for m in rec.messages], "republish into fresh streams only"


async def settled(stack: Stack, timeout: float = 30) -> lag.Lags:
    """Every live projection has applied everything on its subjects."""
    projections = contract.load().projections

    async def done():
        async with stack.pool.acquire() as conn:
            lags = await lag.lags(conn, stack.bus.js, projections)
        return lags if all(p.lag == 0 for p in lags.projections) else None

    return await wait_for(done, timeout=timeout, interval=0.1)


@contextlib.asynccontextmanager
async def recorded(settings):
    """A stack (projectors and API, no runner) holding the recording, its projections caught up."""
    stack = await Stack(settings, runner=False).start()
    try:
        await republish(stack.bus, recording())
        await settled(stack)
        yield stack
    finally:
        await stack.stop()


@pytest.fixture
async def recorded_stack(settings):
    async with recorded(settings) as stack:
        yield stack

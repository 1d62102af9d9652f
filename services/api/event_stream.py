"""`GET /v1/runs/{run_id}/events`: a run's run and node events as server-sent events.

Read from JetStream, not Postgres: an ordered consumer on the run's subjects in the
event stream delivers each event as it is stored, so a viewer sees a node start
while the projection has yet to fold it. Each SSE `id` is the event's stream
sequence; a client that reconnects sends the last one it saw as `Last-Event-ID`
and gets exactly the events after it. The stream ends after the run's final event
(finished or refused); a client resuming after it gets an empty stream.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web
from jetdbt.services.api import auth
from jetdbt.services.api.boundary import error, path
from jetdbt.services.api.keys import BUS
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.stream_batches import last_matching, stream_seq
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.process import logging as jlog
from nats.js import api
from nats.js.errors import NotFoundError

__all__ = ["routes", "KEEPALIVE_SECONDS", "MAX_EVENT_ID"]

# A comment line this often keeps proxies from closing an idle stream and tells the
# server that a client went away while a run sits between nodes.
KEEPALIVE_SECONDS = 15.0
# Far above any stream sequence; past it, a Last-Event-ID is a mistake.
MAX_EVENT_ID = 2**63 - 1
_FAMILIES = ("run", "node")

routes = web.RouteTableDef()


class BadEventId(ValueError):
    """A Last-Event-ID that is not a stream sequence."""


def last_event_id(request: web.Request) -> int:
    """The sequence a client saw last (0 when it sent none); a malformed one is refused."""
    value = request.headers.get("Last-Event-ID", "").strip()
    if not value:
        return 0
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise BadEventId(
            f"header 'Last-Event-ID' is {value[:40]!r}: expected a stream sequence"
            " (a whole number), as sent in an event's id"
        )
    number = int(value)
    if number > MAX_EVENT_ID:
        raise BadEventId(f"header 'Last-Event-ID' is above {MAX_EVENT_ID}")
    return number


def _is_final(data: bytes) -> bool:
    try:
        return isinstance(ev.decode(data), ev.RUN_ENDS)
    except msgspec.DecodeError:  # a type this API does not know yet never ends a stream
        return False


async def _final_seq(js, run_id: str) -> int:
    """The sequence of the run's final event, 0 while it has none (events such as a prune
    may follow it, so the run's newest event is not necessarily its end)."""
    found = 0
    for kind in ev.RUN_END_KINDS:
        subject = subjects.run_event_of_any_project(run_id, kind)
        found = max(found, await last_matching(js, EVENTS, subject))
    return found


def _frame(seq: int, subject: str, data: bytes) -> bytes:
    """One SSE message: the sequence as id, the event's family.kind as its name, the event's
    JSON (one line: msgspec never writes a newline) as data."""
    family, kind = subjects.event_family(subject), subjects.event_kind(subject)
    return b"id: %d\nevent: %s.%s\ndata: %s\n\n" % (seq, family.encode(), kind.encode(), data)


@routes.get("/v1/runs/{run_id}/events")
async def run_events(request: web.Request) -> web.StreamResponse:
    run_id = path(request, "run_id")
    try:
        after = last_event_id(request)
    except BadEventId as exc:
        return error(400, str(exc))
    bus = request.app[BUS]
    pattern = subjects.run_pattern(None, run_id)
    wanted = subjects.SubjectFilter(
        [subjects.run_family_pattern(family, run_id) for family in _FAMILIES]
    )
    try:
        # Found by its run events: another family's subject (a retry state's principal)
        # may hold the same word where a run's subject holds its id.
        newest = await bus.js.get_last_msg(EVENTS, subjects.run_event_of_any_project(run_id, "*"))
    except NotFoundError:
        return error(404, f"run {run_id!r} has no events (yet)")
    # The log may hold a run the projection has yet to fold: scope it by its subject.
    refused = await auth.project_problem(request, subjects.subject_key(newest.subject))
    if refused is not None:
        return refused
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a buffering proxy would hold node events back
        }
    )
    await resp.prepare(request)
    if 0 < await _final_seq(bus.js, run_id) <= after:
        await resp.write_eof()
        return resp
    log = jlog.get("api").bind(run_id=run_id, project=subjects.subject_key(newest.subject))
    # Each event is written from the subscription's own callback, as it is delivered: a
    # hand-off to this handler through a queue cost a task switch per event, and on a
    # busy loop that is where an event waited. `ended` says why the stream stops: its
    # final event was written (True) or the client went away (False).
    ended = asyncio.get_running_loop().create_future()
    sent = 0

    async def on_msg(msg) -> None:
        nonlocal sent
        if ended.done() or not wanted(msg.subject):
            return
        try:
            await resp.write(_frame(stream_seq(msg), msg.subject, msg.data))
        except ConnectionResetError:  # the client went away
            ended.set_result(False)
            return
        sent += 1
        if subjects.event_family(msg.subject) == "run" and _is_final(msg.data):
            ended.set_result(True)

    sub = await bus.js.subscribe(
        pattern,
        stream=EVENTS,
        cb=on_msg,
        ordered_consumer=True,
        config=api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            mem_storage=True,
        ),
        inactive_threshold=30,
    )
    try:
        while not ended.done():
            try:
                await asyncio.wait_for(asyncio.shield(ended), KEEPALIVE_SECONDS)
            except TimeoutError:
                await resp.write(b": keepalive\n\n")
        if ended.result():
            await resp.write_eof()
    except ConnectionResetError:  # a keepalive found the client gone
        if not ended.done():
            ended.set_result(False)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    if not ended.result():
        log.info("event_stream_closed_by_client", sent=sent)
        return resp
    log.info("event_stream_ended", sent=sent, after=after)
    return resp

"""Keep a long-running loop alive: a failure (NATS or Postgres away) is logged and the
loop starts again a second later, from wherever its own durable position says.

An outage is the weather, not a bug: it is one line per retry saying what is retried and
why, with no traceback; any other failure is a bug, logged with its traceback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from jetdbt.shared.bus.outages import outage

__all__ = [
    "alongside",
    "cancel_lost",
    "forever",
    "each_message",
    "pause",
    "to_the_end",
    "unless_stopped",
]

BATCH = 64  # messages fetched at once by each_message
RETRY_SECONDS = 1.0  # before a failed loop starts again


async def forever(
    run_once: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event, log, failure: str
) -> None:
    while not stop.is_set():
        try:
            await run_once(stop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            cause = outage(exc)
            if cause is None:
                log.exception(failure)
            else:
                log.warning(failure, cause=cause, retrying_in=f"{RETRY_SECONDS:g}s")
            await pause(stop, RETRY_SECONDS)


async def each_message(js, consumer: str, stream: str, stop: asyncio.Event, handle) -> None:
    """Hand every message of a durable pull consumer to `handle` in order, acking each once
    handled, until `stop`; a failure leaves the rest unacked for the next loop."""
    sub = await js.pull_subscribe_bind(consumer, stream=stream)
    try:
        while not stop.is_set():
            try:
                msgs = await _fetched(sub, stop)
            except TimeoutError:
                continue
            for msg in msgs:
                await handle(msg)
                await msg.ack()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _fetched(sub, stop: asyncio.Event) -> list:
    """The next batch, or none once `stop` is set: a stack that stops does not wait out a
    fetch (messages it would have had stay unacked for the next loop)."""
    return await unless_stopped(sub.fetch(BATCH, timeout=5), stop) or []


async def unless_stopped(work: Awaitable, stop: asyncio.Event):
    """What `work` returns, or None once `stop` is set first (`work` is then cancelled): a
    stopping stack does not wait out a request's timeout, such as one sent on a connection
    that closed under it, which nats-py leaves unanswered until then."""
    work = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not work.done():
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await work
        return None
    return work.result()


@contextlib.asynccontextmanager
async def alongside(loop: Callable[[asyncio.Event], Awaitable[None]]):
    """Run `loop(stop)` beside the block and end it with the block. `stop` is set before the
    task is cancelled, and the loop must watch it: on Python 3.11 a cancel that lands as a
    NATS request is answered is lost (nats-py waits with `wait_for`), so a loop that relied
    on the cancel alone would go on, and whoever awaits its end would wait forever."""
    stop = asyncio.Event()
    task = asyncio.create_task(loop(stop))
    try:
        yield task
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def cancel_lost() -> None:
    """Raise the cancel this task was sent and did not get: on Python 3.11 nats-py's
    `wait_for` returns a request's answer instead when both arrive in one step. For loops
    that never suppress a cancel of their own, such as one reading dbt's output."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def pause(event: asyncio.Event, seconds: float) -> None:
    """Until `event` is set or `seconds` have passed, whichever is first. `asyncio.timeout`,
    not `wait_for`, which on Python 3.11 may drop a cancel that lands as the event is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


async def to_the_end(work: Awaitable):
    """`work` (a thread's: it cannot be stopped) awaited to its end however often the caller
    is cancelled meanwhile, then the cancel raised: a folder is removed, or a disk
    detached, only once nothing writes in it or mounts it."""
    running = asyncio.ensure_future(work)
    cancelled = None
    while not running.done():
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    return running.result()

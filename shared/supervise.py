"""Keep a long-running loop alive: a failure (NATS or Postgres away) is logged and the
loop starts again a second later, from wherever its own durable position says."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

__all__ = ["forever"]


async def forever(
    run_once: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event, log, failure: str
) -> None:
    while not stop.is_set():
        try:
            await run_once(stop)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(failure)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

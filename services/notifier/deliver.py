"""One delivery: post the signed body, retry with backoff, record every attempt.

Attempt n waits `retry_seconds * 2**(n-2)` after attempt n-1 failed (no answer, or any
answer but 2xx); after `attempts` failures the delivery is `dead`: it gives up, and its
last fact is the hook's dead letter (GET .../deliveries?state=dead). A receiver's
redirect is not followed (a 3xx is a failure): a hook posts only where it was allowed to.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from services.notifier.hook_store import StoredHook
from shared import events as ev
from shared import logging as jlog
from shared import webhooks

__all__ = ["deliver", "TIMEOUT_SECONDS"]

TIMEOUT_SECONDS = 10
_log = jlog.get("notifier")


async def _attempt(session: aiohttp.ClientSession, hook: StoredHook, body: bytes, delivery: str):
    """(HTTP status, error): status 0 when the receiver gave no answer."""
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "jetdbt-notifier",
        webhooks.SIGNATURE: webhooks.sign(hook.secret, stamp, body),
        webhooks.TIMESTAMP: stamp,
        webhooks.DELIVERY: delivery,
    }
    try:
        async with session.post(hook.url, data=body, headers=headers, allow_redirects=False) as r:
            await r.read()
            return r.status, "" if 200 <= r.status < 300 else f"answered {r.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"[:300]


async def deliver(
    bus, session, hook: StoredHook, body: bytes, delivery: str, run_id: str, event: str,
    attempts: int, retry_seconds: float, keep_alive=None,
) -> str:  # fmt: skip
    """Deliver until a 2xx or `attempts` failures; the final state (delivered or dead)."""
    for attempt in range(1, attempts + 1):
        status, error = await _attempt(session, hook, body, delivery)
        state = "delivered" if not error else ("dead" if attempt == attempts else "retrying")
        await bus.publish(
            ev.HookDelivered(
                project=hook.project,
                hook=hook.name,
                delivery_id=delivery,
                run_id=run_id,
                event=event,
                attempt=attempt,
                status=status,
                state=state,
                error=error,
            )  # fmt: skip
        )
        _log.info("hook_attempt", hook=hook.name, project=hook.project, attempt=attempt,
                  status=status, state=state)  # fmt: skip
        if state != "retrying":
            return state
        if keep_alive is not None:
            await keep_alive()
        await asyncio.sleep(retry_seconds * 2 ** (attempt - 1))
    return "dead"

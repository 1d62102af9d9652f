"""One delivery: post the signed body, retry with backoff, record every attempt.

Attempt n waits `retry_seconds * 2**(n-2)` after attempt n-1 failed (no answer, or any
answer but 2xx); after `attempts` failures the delivery is `dead`: it gives up, and its
last fact is the hook's dead letter (GET .../deliveries?state=dead). A hook posts only where
it is allowed to now: its URL is checked against JETDBT_WEBHOOK_HOSTS before each attempt,
the address its name resolves to on each connection, and a receiver's redirect is not
followed (a 3xx is a failure). Only the status of an answer is read, never its body, and
an attempt that failed records a reason of shared/jobs/hook_reasons.py's vocabulary, never an
exception's text (which can quote what a non-HTTP service sent back).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import aiohttp
from aiohttp.resolver import ThreadedResolver
from jetdbt.services.notifier.hook_store import StoredHook
from jetdbt.shared.bus import events as ev
from jetdbt.shared.jobs import hook_reasons, webhooks
from jetdbt.shared.process import logging as jlog

__all__ = ["Poster", "deliver", "give_up", "TIMEOUT_SECONDS"]

TIMEOUT_SECONDS = 10
_log = jlog.get("notifier")


class _NotAllowed(OSError):
    """An address the operator did not allow (aiohttp wraps what a resolver raises)."""


class _Allowed(ThreadedResolver):
    """Resolves a hook's host, refusing an address the operator did not allow it."""

    def __init__(self, allowed: tuple[str, ...]):
        super().__init__()
        self.allowed = allowed

    async def resolve(self, host: str, port: int = 0, family=socket.AF_INET) -> list[dict]:
        found = await super().resolve(host, port, family)
        try:
            for entry in found:
                webhooks.check_address(host, entry["host"], self.allowed)
        except webhooks.BadHook as exc:
            raise _NotAllowed(str(exc)) from None
        return found


class Poster:
    """The notifier's HTTP client: it connects only where JETDBT_WEBHOOK_HOSTS allows (the
    URL before each attempt, every address a name resolves to), takes no proxy from the
    environment, and gives each attempt TIMEOUT_SECONDS."""

    def __init__(self, allowed: tuple[str, ...]):
        self.allowed = allowed
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=_Allowed(allowed), use_dns_cache=False),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS),
        )

    async def __aenter__(self) -> Poster:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()

    async def post(self, hook: StoredHook, body: bytes, delivery: str) -> tuple[int, str]:
        """(HTTP status, reason): status 0 when the receiver gave no answer or may not be
        asked; reason "" when it answered 2xx."""
        try:
            webhooks.check_url(hook.url, self.allowed)
        except webhooks.BadHook:
            return 0, hook_reasons.NOT_ALLOWED
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "jetdbt-notifier",
            webhooks.SIGNATURE: webhooks.sign(hook.secret, stamp, body),
            webhooks.TIMESTAMP: stamp,
            webhooks.DELIVERY: delivery,
        }
        try:
            async with self.http.post(
                hook.url, data=body, headers=headers, allow_redirects=False
            ) as r:
                return r.status, "" if 200 <= r.status < 300 else hook_reasons.answered(r.status)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return 0, _reason(exc)


def _reason(exc: BaseException) -> str:
    """Why no answer came, by the exception's kind alone (its text may quote the bytes)."""
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, _NotAllowed):
        return hook_reasons.NOT_ALLOWED
    if isinstance(exc, (aiohttp.ClientSSLError, ssl.SSLError)):
        return hook_reasons.TLS_FAILED
    if isinstance(exc, TimeoutError):
        return hook_reasons.TIMED_OUT
    if isinstance(exc, (aiohttp.ClientConnectorDNSError, socket.gaierror)):
        return hook_reasons.NOT_RESOLVED
    return hook_reasons.NO_HTTP_ANSWER


async def _record(
    bus, hook: StoredHook, delivery: str, run_id: str, event: str, attempt: int, status: int,
    state: str, error: str,
) -> None:  # fmt: skip
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


async def deliver(
    bus, poster: Poster, hook: StoredHook, body: bytes, delivery: str, run_id: str, event: str,
    attempts: int, retry_seconds: float, keep_alive=None,
) -> str:  # fmt: skip
    """Deliver until a 2xx or `attempts` failures; the final state (delivered or dead)."""
    for attempt in range(1, attempts + 1):
        status, error = await poster.post(hook, body, delivery)
        state = "delivered" if not error else ("dead" if attempt == attempts else "retrying")
        await _record(bus, hook, delivery, run_id, event, attempt, status, state, error)
        if state != "retrying":
            return state
        if keep_alive is not None:
            await keep_alive()
        await asyncio.sleep(retry_seconds * 2 ** (attempt - 1))
    return "dead"


async def give_up(bus, hook: StoredHook, delivery: str, run_id: str, event: str):
    """Record a delivery dead without trying it (its hook's backlog is full)."""
    await _record(bus, hook, delivery, run_id, event, 1, 0, "dead", hook_reasons.BACKLOG_FULL)

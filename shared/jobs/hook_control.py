"""Asking the notifier to add or remove a hook: a NATS request on `subjects.hook_control`,
never a stored command, because an add carries the hook's secret, which no stream may keep.
The API and the CLI ask the same way; services/notifier/control.py answers."""

from __future__ import annotations

import msgspec
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.jobs import webhooks
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

__all__ = ["HOOK_REQUEST_SECONDS", "NotifierAway", "ask_notifier"]

# How long a hook request waits for the notifier's answer.
HOOK_REQUEST_SECONDS = 10


class NotifierAway(RuntimeError):
    """No notifier answered a hook request."""


async def ask_notifier(bus: Bus, project: str, request: webhooks.HookRequest) -> webhooks.HookReply:
    """The notifier's answer to one hook request (add or remove); NotifierAway when none
    answers (no notifier running, or a NATS user that may not ask: only the API's and the
    operator's may)."""
    try:
        msg = await bus.nc.request(
            subjects.hook_control(project),
            msgspec.json.encode(request),
            timeout=HOOK_REQUEST_SECONDS,
        )
    except (NoRespondersError, NatsTimeout):
        raise NotifierAway(
            f"no notifier answered within {HOOK_REQUEST_SECONDS} s: is `jetdbt serve notifier`"
            " running, and is this the API's or the operator's NATS user?"
        ) from None
    return msgspec.json.decode(msg.data, type=webhooks.HookReply)

"""Every event a test's stack publishes, collected from a core subscription made before the
test's first command (the `events` fixture in tests/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jetdbt.shared.bus import events as ev


class Events:
    """Every event on dbt.evt.>, collected from a core subscription made before publishing."""

    def __init__(self):
        self.seen: list[ev.Event] = []
        self._arrived = asyncio.Condition()

    async def on_msg(self, msg) -> None:
        event = ev.decode(msg.data)
        async with self._arrived:
            self.seen.append(event)
            self._arrived.notify_all()

    async def first(self, match: Callable[[ev.Event], bool], timeout: float = 20) -> ev.Event:
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: any(match(e) for e in self.seen))
            return next(e for e in self.seen if match(e))

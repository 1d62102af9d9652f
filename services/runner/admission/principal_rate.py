"""How much one principal's publishes may add to the log: a bound per minute, per runner.

The event log is never purged, so what an external system may make a runner write there
is bounded: at most `limit` of its publishes a minute are handled; the first one past the
limit is refused with a reason naming the limit, and the rest of that minute are dropped
with a log line. One principal adds at most `limit + 1` refusals or requests a minute to
each runner's share of the log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ["PrincipalRate", "Verdict", "WINDOW_SECONDS"]

WINDOW_SECONDS = 60.0
Verdict = Literal["pass", "refuse", "drop"]


class PrincipalRate:
    """Counts each principal's publishes in fixed one-minute windows."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}

    def admit(self, principal: str) -> Verdict:
        now = self._clock()
        started, count = self._windows.get(principal, (now, 0))
        if now - started >= WINDOW_SECONDS:
            started, count = now, 0
        count += 1
        self._windows[principal] = (started, count)
        if len(self._windows) > 10_000:  # principals come and go: forget finished windows
            self._windows = {p: w for p, w in self._windows.items() if now - w[0] < WINDOW_SECONDS}
        if count <= self.limit:
            return "pass"
        return "refuse" if count == self.limit + 1 else "drop"

    def reason(self, principal: str) -> str:
        return (
            f"principal {principal!r} published more than {self.limit} commands or declared"
            " writes in a minute (EXTERNAL_PUBLISHES_PER_MINUTE); the rest of this minute's"
            " are dropped"
        )

"""Bringing projections from their checkpoints to given positions, reading the log once.

A replay builds its shadow with this, and catches the shadow up to the live
checkpoints inside its compare and swap transactions: the same folds and the same
batch loop as the live projectors, one ordered read on the subject that covers
every fold it feeds.
"""

from __future__ import annotations

import contextlib
import gc

from jetdbt.projections.loop import Projector, checkpoint
from jetdbt.projections.registry import FOLDS
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.stream_batches import Slice
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.bus.subjects import covering

__all__ = ["catch_up", "BATCH"]

BATCH = 5000
GC_THRESHOLD = 50_000
ROUTES = 100_000  # subjects whose folds are remembered while reading


class _OnePass:
    """One ordered read of the log feeding several folds, each between its own checkpoint
    and target: a message goes to the folds whose subjects it is on, and a fold that
    gets nothing from a batch only has its position moved, once, at the end."""

    def __init__(self, projectors: dict[str, Projector], after: dict, until: dict):
        self.projectors = projectors
        self.after = after
        self.until = until
        self.applied = dict.fromkeys(projectors, 0)
        self.owed = dict.fromkeys(projectors, 0)
        self.routes: dict[str, tuple[str, ...]] = {}  # subject -> the folds that read it

    def _takers(self, subject: str) -> tuple[str, ...]:
        takers = self.routes.get(subject)
        if takers is None:
            if len(self.routes) >= ROUTES:
                self.routes.clear()
            takers = tuple(n for n, p in self.projectors.items() if p.wants(subject))
            self.routes[subject] = takers
        return takers

    async def feed(self, pairs) -> None:
        parts: dict[str, list] = {n: [] for n in self.projectors}
        for seq, msg in pairs:
            for n in self._takers(msg.subject):
                if self.after[n] < seq <= self.until[n]:
                    parts[n].append((seq, msg))
        last = pairs[-1][0]
        for n, projector in self.projectors.items():
            self.owed[n] = max(self.owed[n], min(last, self.until[n]))
            if parts[n]:
                await projector.apply_batch(parts[n], upto=self.owed[n])
                self.applied[n] += len(parts[n])

    async def finish(self) -> None:
        for n, projector in self.projectors.items():
            if self.owed[n] > self.after[n]:
                await projector.apply_batch([], upto=self.owed[n])


@contextlib.contextmanager
def _rare_collections():
    """A replay allocates millions of short-lived objects while tens of thousands are in
    flight; at the default threshold the cycle collector runs every 700 allocations and
    takes ~15% of a replay (bench/bench_replay.py)."""
    before = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


async def catch_up(
    bus: Bus, pool, names: list[str], subjects: dict[str, list[str]], until: dict[str, int]
) -> dict[str, int]:
    """Bring each projection in `names` from its checkpoint to `until[name]`, reading the log
    once, on the one subject that covers them all. Returns the events each one applied."""
    async with pool.acquire() as conn:
        after = {n: await checkpoint(conn, n) for n in names}
    behind = [n for n in names if until.get(n, 0) > after[n]]
    applied = dict.fromkeys(names, 0)
    if not behind:
        return applied
    projectors = {n: Projector(bus, pool, FOLDS[n](bus), subjects[n], batch=BATCH) for n in behind}
    reading = _OnePass(projectors, after, until)
    pattern = covering([s for n in behind for s in subjects[n]])
    first, last = min(after[n] for n in behind), max(until[n] for n in behind)
    with _rare_collections():
        async with Slice(bus.js, EVENTS, pattern, after=first, until=last, batch=BATCH) as it:
            async for pairs in it:
                await reading.feed(pairs)
    await reading.finish()
    return applied | reading.applied

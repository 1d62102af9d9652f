"""Runs of one project asked for all at once: every one passes, and no two builds overlap
(one run per project and environment at a time)."""

from __future__ import annotations

import asyncio

from tests.support.chaos.harness import Tally, open_world

__all__ = ["concurrent_runs"]


async def concurrent_runs(tally: Tally, root, pg_url: str, count: int) -> None:
    # Enough runner slots for all of them: only the environment may make them wait.
    env = {"MAX_CONCURRENT_RUNS": str(count)}
    async with open_world(root, "concurrent", pg_url, env=env) as w:
        await w.deploy()
        w.release.touch()  # no gate: each build runs through
        run_ids = [await w.start(tally, f"same{k}") for k in range(count)]
        await asyncio.gather(*(w.judge(tally, run_id) for run_id in run_ids))
        await w.replay(tally)

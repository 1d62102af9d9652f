"""Runner processes SIGKILLed mid-build: the next attempt builds, and no dbt outlives its runner.

Two runner processes share the work (each its own home, one warehouse file); the one
whose job folder holds the gated dbt is killed. From that moment the harness watches
for any process still working inside the dead runner's home: an orphaned dbt. The
killed runner is started again, so two are always there to take the redelivery.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from tests.support.chaos.harness import Tally, gated_runs, open_world, stop_process
from tests.support.processes import ACK_WAIT, runner_process, working_in

__all__ = ["runner_kills"]

ORPHAN_WATCH = 30.0  # seconds an orphan is watched before the harness kills it itself
_PF_EXITING = 0x4  # /proc/<pid>/stat flags: the process is in its exit, nothing runs in it


def _exiting(pid: int) -> bool:
    """True when `pid` is being torn down (or gone): a SIGKILLed dbt keeps its working
    directory while the kernel frees its memory, tens of milliseconds, but runs nothing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    flags = int(stat[stat.rindex(")") + 2 :].split()[6])
    return bool(flags & _PF_EXITING)


def _living_in(folder: Path) -> list[int]:
    return [pid for pid in working_in(folder) if not _exiting(pid)]


async def _orphan_seconds(folder: Path) -> float:
    """How long processes went on living in `folder` after its runner died (0: none did)."""
    if not _living_in(folder):
        return 0.0
    began = time.monotonic()
    while _living_in(folder):
        if time.monotonic() - began > ORPHAN_WATCH:
            for pid in _living_in(folder):
                os.kill(pid, signal.SIGKILL)
            break
        await asyncio.sleep(0.01)
    return time.monotonic() - began


async def runner_kills(tally: Tally, root, pg_url: str, count: int) -> None:
    env = {"RUN_ACK_WAIT_SECONDS": str(ACK_WAIT)}
    async with open_world(root, "runner_kill", pg_url, runner=False, env=env) as w:
        homes = [w.folder / "runner-a", w.folder / "runner-b"]
        procs = [runner_process(w.settings, home, w.warehouses) for home in homes]

        async def kill_the_holder(run_id: str) -> None:
            holder = next((i for i, home in enumerate(homes) if working_in(home)), None)
            if holder is None:
                tally.note(f"{run_id}: no runner was seen building; nothing was killed")
                return
            procs[holder].send_signal(signal.SIGKILL)  # the runner alone, not its group
            await asyncio.to_thread(procs[holder].wait)
            lived = await _orphan_seconds(homes[holder])
            tally.orphan_seconds = max(tally.orphan_seconds, lived)
            procs[holder] = runner_process(w.settings, homes[holder], w.warehouses)

        try:
            await w.deploy()
            await gated_runs(w, tally, count, "kill", kill_the_holder)
        finally:
            await asyncio.gather(*(asyncio.to_thread(stop_process, p) for p in procs))

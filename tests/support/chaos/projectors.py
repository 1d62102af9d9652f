"""Projector processes SIGKILLed inside a batch while real builds publish: after a restart
every run is projected whole, and the live tables equal a replay of the log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import uuid

from tests.support.chaos.harness import Tally, open_world, stop_process
from tests.support.helpers import wait_for
from tests.support.processes import BIN, FOLDING, with_app_name

__all__ = ["projector_kills"]

# A projector connection holds a transaction that has folded at least one event.
IN_BATCH = (
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1 AND query ~ $2"
    " AND xact_start IS NOT NULL AND state IN ('active', 'idle in transaction')"
)


async def projector_kills(tally: Tally, root, pg_url: str, count: int) -> None:
    async with open_world(root, "projector_kill", pg_url, projectors=False) as w:
        marker = f"chaos-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "NATS_URL": w.settings.nats_url,
            "DATABASE_URL": with_app_name(pg_url, marker),
            "JETDBT_SCHEMA": w.settings.schema,
            "JETDBT_HOME": str(w.folder / "projectors"),
            # A restart after a SIGKILL takes the dead one's lease within half a second.
            "JETDBT_PROJECTOR_LEASE_SECONDS": "0.5",
        }
        log = open(w.folder / "projectors.log", "ab")  # noqa: SIM115 - shared by every child

        def projectors() -> subprocess.Popen:
            return subprocess.Popen(
                [str(BIN / "jetdbt"), "serve", "projectors"],
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

        async def in_batch() -> bool:
            async with w.stack.pool.acquire() as conn:
                return await conn.fetchval(IN_BATCH, marker, FOLDING)

        await w.deploy()
        w.release.touch()  # no gate: builds follow each other while projectors die
        stop = asyncio.Event()
        runs: list[str] = []

        async def builds() -> None:
            while not stop.is_set():
                runs.append(await w.start(tally, f"proj{len(runs)}"))
                await w.finished(runs[-1])

        flowing = asyncio.create_task(builds())
        proc = None
        inside = 0
        try:
            for _ in range(count):
                proc = projectors()
                await asyncio.sleep(random.uniform(1.0, 2.5))  # some batches commit first
                with contextlib.suppress(TimeoutError):
                    inside += bool(await wait_for(in_batch, timeout=15, interval=0.002))
                proc.send_signal(signal.SIGKILL)
                await asyncio.to_thread(proc.wait)
            proc = projectors()
            stop.set()
            await flowing
            for run_id in runs:
                await w.judge(tally, run_id)
            await w.replay(tally)
            tally.note(f"projector kills inside a batch: {inside} of {count}")
        finally:
            stop.set()
            flowing.cancel()
            with contextlib.suppress(BaseException):
                await flowing
            if proc is not None:
                await asyncio.to_thread(stop_process, proc)
            log.close()

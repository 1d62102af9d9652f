"""Two projector processes, one folding: SIGKILL the active one while events flow, and the
standby takes over within its lease, catches up within a second, and every event is folded
once (the checkpoint at the stream's end, no dead letter, a replay with 0 differences)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from jetdbt.projections import lag
from jetdbt.projections.loop import checkpoint
from jetdbt.projections.replay import replay
from jetdbt.services.api.projector_roles import METRIC
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.stream_batches import last_seq
from jetdbt.shared.bus.streams import EVENTS

from tests.support import synthetic
from tests.support.helpers import get_json, get_text, wait_for
from tests.support.processes import serve

LEASE = 1.0  # JETDBT_PROJECTOR_LEASE_SECONDS: a takeover in about a second


async def test_standby_projector_takes_over_from_a_killed_active_one(settings, pg_url, tmp_path):
    # The API alone in this process: it applies the contract and says who folds.
    stack = await Stack.serving(settings, {"api"}).start()
    env = {
        "NATS_URL": settings.nats_url,
        "DATABASE_URL": pg_url,
        "JETDBT_SCHEMA": settings.schema,
        "JETDBT_PROJECTOR_LEASE_SECONDS": str(LEASE),
    }
    projections = contract.load().projections
    stop = asyncio.Event()
    served = []

    async def roles() -> dict:
        _, body = await get_json(f"{stack.api_url}/healthz")
        return body["projectors"] or {}

    def roles_are(active: str, standbys: list[str]):
        async def check() -> bool:
            return await roles() == {"active": active, "standbys": standbys}

        return check

    async def publish() -> int:
        k = 0
        while not stop.is_set():
            await synthetic.publish(stack.bus, synthetic.log(1, start=k), 16)
            await asyncio.sleep(0.02)
            k += 1
        return k

    async def caught_up() -> bool:
        async with stack.pool.acquire() as conn:
            found = await lag.lags(conn, stack.bus.js, projections)
        return all(p.lag == 0 for p in found.projections)

    flowing = None
    try:
        served.append(serve("projectors", "proj-a", tmp_path, env))
        await wait_for(roles_are("proj-a", []), timeout=30, interval=0.05)
        served.append(serve("projectors", "proj-b", tmp_path, env))
        await wait_for(roles_are("proj-a", ["proj-b"]), timeout=30, interval=0.05)

        flowing = asyncio.create_task(publish())
        await asyncio.sleep(1.0)  # proj-a folds while events flow
        killed = time.monotonic()
        await asyncio.to_thread(served[0].kill)
        await asyncio.sleep(0.3)  # events land while nobody folds
        stop.set()
        runs = await flowing
        await wait_for(roles_are("proj-b", []), timeout=10, interval=0.02)
        took_over = time.monotonic()
        await wait_for(caught_up, timeout=10, interval=0.02)
        lag_zero = time.monotonic() - took_over
        print(f"takeover {took_over - killed:.2f}s after SIGKILL; lag 0 {lag_zero:.2f}s later")
        assert took_over - killed < LEASE * 3
        assert lag_zero < 1.0

        _, metrics = await get_text(f"{stack.api_url}/metrics")
        assert f'{METRIC}{{process="proj-b",role="active"}} 1' in metrics
        assert 'process="proj-a"' not in metrics

        total = await last_seq(stack.bus.js, EVENTS)
        async with stack.pool.acquire() as conn:
            # Every event is a run's: the progress fold's checkpoint is the stream's end.
            assert await checkpoint(conn, "progress") == total
            assert await conn.fetchval("SELECT count(*) FROM runs") == runs
            assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
        report = await replay(stack.bus, pg_url, settings.schema)
        assert report.differences == 0, [d for t in report.tables for d in t.shown]
    finally:
        stop.set()
        if flowing is not None:
            with contextlib.suppress(BaseException):
                await flowing
        for process in served:
            await asyncio.to_thread(process.stop)
        await stack.stop()

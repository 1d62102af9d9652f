"""A projector process SIGKILLed mid-batch, ten times, while events flow: after a restart the
live tables equal a replay of the log, and the log exports to Parquet one row per event."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import uuid

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from jetdbt.projections import lag
from jetdbt.projections.loop import checkpoint
from jetdbt.projections.migrate import connect_pool, quote_ident
from jetdbt.projections.replay import replay
from jetdbt.services.audit.export import SCHEMA, export
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import EVENTS

from tests.support import synthetic
from tests.support.helpers import wait_for
from tests.support.processes import BIN, FOLDING, with_app_name

KILLS = 10


async def test_projector_killed_mid_batch_ten_times_loses_nothing(nats_url, pg_url, tmp_path):
    schema = f"t_{uuid.uuid4().hex[:12]}"
    marker = f"kill-{uuid.uuid4().hex[:8]}"
    bus = await connect(nats_url, "test")
    pool = await connect_pool(pg_url, schema)
    env = {
        **os.environ,
        "NATS_URL": nats_url,
        "DATABASE_URL": with_app_name(pg_url, marker),
        "JETDBT_SCHEMA": schema,
        "JETDBT_HOME": str(tmp_path / "home"),
        # A restart after a SIGKILL takes the dead one's lease within half a second.
        "JETDBT_PROJECTOR_LEASE_SECONDS": "0.5",
    }
    log = open(tmp_path / "projectors.log", "ab")  # noqa: SIM115 - shared by every child

    def start() -> subprocess.Popen:
        return subprocess.Popen(
            [str(BIN / "jetdbt"), "serve", "projectors"], env=env, stdout=log, stderr=log
        )

    async def in_batch() -> bool:
        """A projector transaction is open and has folded at least one event into it."""
        async with pool.acquire() as conn:
            return await conn.fetchval(
                "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1"
                " AND xact_start IS NOT NULL AND state IN ('active', 'idle in transaction')"
                " AND query ~ $2",
                marker,
                FOLDING,
            )

    stop = asyncio.Event()

    async def publish() -> int:
        k = 0
        while not stop.is_set():
            await synthetic.publish(bus, synthetic.log(1, start=k), 16)
            await asyncio.sleep(0.05)
            k += 1
        return k

    flowing = asyncio.create_task(publish())
    proc = None
    marks = []
    try:
        for _ in range(KILLS):
            proc = start()
            await asyncio.sleep(random.uniform(1.0, 2.5))  # some batches commit first
            await wait_for(in_batch, timeout=30, interval=0.002)
            await asyncio.sleep(random.uniform(0, 0.02))
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
            assert proc.returncode == -signal.SIGKILL
            async with pool.acquire() as conn:
                marks.append(await checkpoint(conn, "progress"))
        assert marks == sorted(marks) and marks[-1] > 0, marks  # kills fell all along the log
        proc = start()
        await asyncio.sleep(1)
        stop.set()
        runs = await flowing
        projections = contract.load().projections

        async def caught_up():
            async with pool.acquire() as conn:
                lags = await lag.lags(conn, bus.js, projections)
            return all(p.lag == 0 for p in lags.projections)

        await wait_for(caught_up, timeout=60, interval=0.2)
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM runs") == runs
            assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
        report = await replay(bus, pg_url, schema)
        assert report.differences == 0, [d for t in report.tables for d in t.shown]
        built = sum(k % 11 != 10 for k in range(runs))  # every 11th synthetic run is refused
        rows = {t.table: t.live_rows for t in report.tables}
        assert rows["runs"] == runs and rows["run_nodes"] == built * synthetic.NODES

        out = tmp_path / "log.parquet"
        done = await export(bus, out)
        total = (await bus.js.stream_info(EVENTS)).state.last_seq
        table = pq.read_table(out)
        assert done.rows == table.num_rows == total
        assert table.schema.equals(SCHEMA)
        assert table.column("stream_seq").to_pylist() == list(range(1, total + 1))
        assert table.schema.field("time").type == pa.timestamp("us", tz="UTC")
        first = table.slice(0, 1).to_pylist()[0]
        assert first["event_type"] == "deploy.requested.v1" and first["project"] == "synth"
        payload = msgspec.json.decode(table.column("payload")[1].as_py())
        assert payload["type"] == table.column("event_type")[1].as_py() == "run.requested.v1"
        assert table.column("run_id")[1].as_py() == "r0"
    finally:
        stop.set()
        if proc is not None and proc.poll() is None:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 10)
        with contextlib.suppress(BaseException):
            await flowing
        log.close()
        async with pool.acquire() as conn:
            await conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
        await pool.close()
        await bus.close()

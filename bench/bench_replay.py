"""Replay rate beside the rate of a bare nats-py consumer decoding the same stream.

Starts its own nats-server and Postgres (or uses DATABASE_URL), publishes a
synthetic log, then times, over the same stream in the same run: a bare
ordered push consumer that only decodes (the fastest way nats-py reads), a
bare pull consumer that only decodes (the live projector's way of reading),
and a replay of every projection into a fresh schema. Not a test: it prints.

    .venv/bin/python bench/bench_replay.py [EVENTS]   (default 50000)
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nats.js import api  # noqa: E402

from projections.migrate import connect_pool, quote_ident  # noqa: E402
from projections.registry import FOLDS  # noqa: E402
from projections.replay import catch_up  # noqa: E402
from services.embedded import NatsServer, start_postgres  # noqa: E402
from shared import contract  # noqa: E402
from shared import events as ev  # noqa: E402
from shared import logging as jlog  # noqa: E402
from shared.bus import EVENTS, connect  # noqa: E402
from shared.reader import last_seq  # noqa: E402
from tests import synthetic  # noqa: E402

TARGET = 0.8
PULL_BATCH = 256  # the live projector's batch


async def bare_ordered(js, total: int) -> float:
    """Events per second: an ordered push consumer whose callback only decodes."""
    done = asyncio.Event()
    seen = 0

    async def on_msg(msg) -> None:
        nonlocal seen
        ev.decode(msg.data)
        seen += 1
        if seen == total:
            done.set()

    started = time.perf_counter()
    sub = await js.subscribe("dbt.evt.>", stream=EVENTS, cb=on_msg, ordered_consumer=True)
    await done.wait()
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    return total / elapsed


async def bare_pull(js, total: int) -> float:
    """Events per second: a pull consumer fetching batches and only decoding."""
    config = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, inactive_threshold=30)
    info = await js.add_consumer(EVENTS, config)
    sub = await js.pull_subscribe_bind(info.name, stream=EVENTS)
    started = time.perf_counter()
    seen = 0
    while seen < total:
        for msg in await sub.fetch(PULL_BATCH, timeout=5):
            ev.decode(msg.data)
            seen += 1
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    return total / elapsed


async def main(events: int) -> None:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        nats = NatsServer(Path(tmp) / "nats").start()
        pg, dsn = None, os.environ.get("DATABASE_URL")
        if not dsn:
            pg, dsn = start_postgres(Path(tmp) / "pg")
        bus = await connect(nats.url, "bench")
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        pool = None
        try:
            await synthetic.publish(bus, itertools.islice(synthetic.log(events), events))
            total = await last_seq(bus.js, EVENTS)
            print(f"log: {total} synthetic events (runs of 20 nodes)")
            ordered = await bare_ordered(bus.js, total)
            pulled = await bare_pull(bus.js, total)
            subjects = contract.load().projections
            pool = await connect_pool(dsn, schema, min_size=1, max_size=len(FOLDS) + 1)
            started = time.perf_counter()
            read = await asyncio.gather(
                *(catch_up(bus, pool, name, subjects[name], total) for name in FOLDS)
            )
            replayed = sum(read) / (time.perf_counter() - started)
            print(f"bare nats-py ordered consumer, decoding: {ordered:10.0f} events/s")
            print(f"bare nats-py pull consumer, decoding:    {pulled:10.0f} events/s")
            print(f"replay of every projection:              {replayed:10.0f} events/s")
            print(
                f"replay / ordered consumer: {replayed / ordered:.0%};"
                f" replay / pull consumer: {replayed / pulled:.0%} (target {TARGET:.0%})"
            )
        finally:
            if pool is not None:
                async with pool.acquire() as conn:
                    await conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
                await pool.close()
            await bus.close()
            nats.stop()
            if pg is not None:
                pg.cleanup()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000))

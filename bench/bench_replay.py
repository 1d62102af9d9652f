"""Replay rate beside the rate of a bare nats-py consumer decoding the same stream.

Starts its own nats-server and Postgres (or uses DATABASE_URL), publishes a
synthetic log, then times, over the same stream in the same run: a bare
ordered push consumer that only decodes (the fastest way nats-py reads), a
bare pull consumer that only decodes (the live projector's way of reading),
and a replay of every projection into a fresh schema. Not a test: it prints.

    .venv/bin/python bench/bench_replay.py [EVENTS [TRIALS]]   (default 50000, 3)

The machine's speed wanders (a shared VM), so each reader runs TRIALS times,
interleaved, and the best of each is compared.
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

from projections.catch_up import catch_up  # noqa: E402
from projections.migrate import connect_pool, quote_ident  # noqa: E402
from projections.registry import FOLDS  # noqa: E402
from services.stack.embedded import NatsServer, start_postgres  # noqa: E402
from shared import contract  # noqa: E402
from shared import events as ev  # noqa: E402
from shared import logging as jlog  # noqa: E402
from shared.bus import connect  # noqa: E402
from shared.reader import last_seq  # noqa: E402
from shared.streams import EVENTS  # noqa: E402
from tests.support import synthetic  # noqa: E402

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


async def replay_rate(bus, dsn: str, total: int) -> float:
    """Events per second: every projection rebuilt into a fresh schema, then dropped."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    pool = await connect_pool(dsn, schema, min_size=1, max_size=2)
    try:
        subjects = contract.load().projections
        started = time.perf_counter()
        applied = await catch_up(bus, pool, list(FOLDS), subjects, dict.fromkeys(FOLDS, total))
        return sum(applied.values()) / (time.perf_counter() - started)
    finally:
        async with pool.acquire() as conn:
            await conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
        await pool.close()


async def main(events: int, trials: int) -> None:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        nats = NatsServer(Path(tmp) / "nats").start()
        pg, dsn = None, os.environ.get("DATABASE_URL")
        if not dsn:
            pg, dsn = start_postgres(Path(tmp) / "pg")
        bus = await connect(nats.url, "bench")
        try:
            await synthetic.publish(bus, itertools.islice(synthetic.log(events), events))
            total = await last_seq(bus.js, EVENTS)
            print(f"log: {total} synthetic events (runs of 20 nodes); best of {trials} trials")
            rates: dict[str, list[float]] = {"ordered": [], "pull": [], "replay": []}
            for _ in range(trials):  # interleaved, so a noisy moment hits every reader alike
                rates["ordered"].append(await bare_ordered(bus.js, total))
                rates["pull"].append(await bare_pull(bus.js, total))
                rates["replay"].append(await replay_rate(bus, dsn, total))
            ordered, pulled, replayed = (max(rates[k]) for k in ("ordered", "pull", "replay"))
            for name, label in (
                ("ordered", "bare nats-py ordered consumer, decoding:"),
                ("pull", "bare nats-py pull consumer, decoding:   "),
                ("replay", "replay of every projection:             "),
            ):
                trials_text = " ".join(f"{r:.0f}" for r in rates[name])
                print(f"{label} {max(rates[name]):10.0f} events/s   (trials: {trials_text})")
            print(
                f"replay / ordered consumer: {replayed / ordered:.0%};"
                f" replay / pull consumer: {replayed / pulled:.0%} (target {TARGET:.0%})"
            )
        finally:
            await bus.close()
            nats.stop()
            if pg is not None:
                pg.cleanup()


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 50_000, args[1] if len(args) > 1 else 3))

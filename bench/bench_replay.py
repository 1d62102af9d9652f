"""Replay rate beside a minimal one-table fold and bare nats-py consumers of the same stream.

Starts its own nats-server and Postgres (or uses DATABASE_URL), publishes a
synthetic log, then times four readers of the same stream in the same run: a
bare ordered push consumer that only decodes (the fastest way nats-py reads), a
bare pull consumer that only decodes (the live projector's way of reading), a
minimal one-table fold (decode, one row per event, COPY in batches with a
checkpoint) and a replay of every projection into a fresh schema. The goal:
replay at least as fast as the minimal fold. Not a test: it prints.

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

import asyncpg  # noqa: E402
from jetdbt.projections.catch_up import BATCH, catch_up  # noqa: E402
from jetdbt.projections.migrate import connect_pool, quote_ident  # noqa: E402
from jetdbt.projections.registry import FOLDS  # noqa: E402
from jetdbt.services.stack.embedded import NatsServer, start_postgres  # noqa: E402
from jetdbt.shared.bus import contract  # noqa: E402
from jetdbt.shared.bus import events as ev  # noqa: E402
from jetdbt.shared.bus.connection import connect  # noqa: E402
from jetdbt.shared.bus.stream_batches import last_seq, stream_seq  # noqa: E402
from jetdbt.shared.bus.streams import EVENTS  # noqa: E402
from jetdbt.shared.process import logging as jlog  # noqa: E402
from nats.js import api  # noqa: E402

from tests.support import synthetic  # noqa: E402

TARGET = 0.8
GOAL = 1.0  # replay / minimal one-table fold
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


ONE_TABLE = """
CREATE SCHEMA {s};
CREATE TABLE {s}.events (seq bigint PRIMARY KEY, subject text NOT NULL, type text NOT NULL,
                         at timestamptz);
CREATE TABLE {s}.checkpoint (seq bigint NOT NULL);
INSERT INTO {s}.checkpoint VALUES (0);
"""


async def minimal_fold(js, dsn: str, total: int) -> float:
    """Events per second: one row per event and a checkpoint, COPY'd into a fresh schema.

    The callback decodes and builds rows and hands each full batch through a bounded
    queue (the depth replay's reader uses) to the writer, this coroutine, which copies
    it and moves the checkpoint in one transaction. A queue rather than awaiting the
    COPY in the callback, because that is how replay overlaps reading with writing:
    the next batch is decoded while the last is written, and a full queue holds the
    callback back.
    """
    schema = quote_ident(f"bench_fold_{uuid.uuid4().hex[:8]}")
    settings = {"search_path": schema, "synchronous_commit": "off"}  # as connect_pool sets
    conn = await asyncpg.connect(dsn, server_settings=settings)
    queue: asyncio.Queue = asyncio.Queue(4)
    rows: list[tuple] = []
    seen = 0

    async def on_msg(msg) -> None:
        nonlocal rows, seen
        event = ev.decode(msg.data)
        tag = type(event).__struct_config__.tag
        rows.append((stream_seq(msg), msg.subject, tag, getattr(event, "at", None)))
        seen += 1
        if len(rows) >= BATCH or seen == total:
            batch, rows = rows, []
            await queue.put(batch)

    try:
        await conn.execute(ONE_TABLE.format(s=schema))
        started = time.perf_counter()
        sub = await js.subscribe("dbt.evt.>", stream=EVENTS, cb=on_msg, ordered_consumer=True)
        written = 0
        while written < total:
            batch = await queue.get()
            async with conn.transaction():
                await conn.copy_records_to_table("events", records=batch)
                await conn.execute("UPDATE checkpoint SET seq = $1", batch[-1][0])
            written += len(batch)
        elapsed = time.perf_counter() - started
        await sub.unsubscribe()
        return total / elapsed
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def replay_rate(bus, dsn: str, total: int) -> float:
    """Events per second: every projection rebuilt into a fresh schema, then dropped.

    Counts the log's events, as the other readers do, not the folds' applications:
    an event two folds read (a run's end, a deploy) would otherwise count twice."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    pool = await connect_pool(dsn, schema, min_size=1, max_size=2)
    try:
        subjects = contract.load().projections
        started = time.perf_counter()
        await catch_up(bus, pool, list(FOLDS), subjects, dict.fromkeys(FOLDS, total))
        return total / (time.perf_counter() - started)
    finally:
        async with pool.acquire() as conn:
            await conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
        await pool.close()


LABELS = {
    "ordered": "bare nats-py ordered consumer, decoding:",
    "pull": "bare nats-py pull consumer, decoding:",
    "fold": "minimal one-table fold:",
    "replay": "replay of every projection:",
}


def _mark(ratio: float, goal: float) -> str:
    return f"{ratio:.0%} (goal: at least {goal:.0%}) {'ok' if ratio >= goal else 'MISSED'}"


def report(rates: dict[str, list[float]]) -> None:
    best = {name: max(found) for name, found in rates.items()}
    for name, label in LABELS.items():
        trials_text = " ".join(f"{r:.0f}" for r in rates[name])
        print(f"{label:41} {best[name]:10.0f} events/s   (trials: {trials_text})")
    replayed = best["replay"]
    print(f"replay / minimal one-table fold: {_mark(replayed / best['fold'], GOAL)}")
    print(
        f"replay / ordered consumer: {replayed / best['ordered']:.0%};"
        f" replay / pull consumer: {replayed / best['pull']:.0%} (target {TARGET:.0%})"
    )


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
            rates: dict[str, list[float]] = {name: [] for name in LABELS}
            for _ in range(trials):  # interleaved, so a noisy moment hits every reader alike
                rates["ordered"].append(await bare_ordered(bus.js, total))
                rates["pull"].append(await bare_pull(bus.js, total))
                rates["fold"].append(await minimal_fold(bus.js, dsn, total))
                rates["replay"].append(await replay_rate(bus, dsn, total))
            report(rates)
        finally:
            await bus.close()
            nats.stop()
            if pg is not None:
                pg.cleanup()


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 50_000, args[1] if len(args) > 1 else 3))

"""Peak memory of `jetdbt audit export` over a million-event log.

Starts its own nats-server, publishes synthetic events, then runs the export as
a child process, as a user would, and reads that child's peak resident set size
from the kernel once it has exited. Not a test: it prints.

    .venv/bin/python bench/bench_export.py [EVENTS]   (default 1000000)
"""

from __future__ import annotations

import asyncio
import itertools
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402
from jetdbt.services.stack.embedded import NatsServer  # noqa: E402
from jetdbt.shared.bus.connection import connect  # noqa: E402
from jetdbt.shared.bus.stream_batches import last_seq  # noqa: E402
from jetdbt.shared.bus.streams import EVENTS  # noqa: E402
from jetdbt.shared.process import logging as jlog  # noqa: E402

from tests.support import synthetic  # noqa: E402

LIMIT_MB = 300


async def fill(url: str, events: int) -> int:
    bus = await connect(url, "bench")
    try:
        started = time.perf_counter()
        await synthetic.publish(bus, itertools.islice(synthetic.log(events), events), 512)
        total = await last_seq(bus.js, EVENTS)
        print(f"published {total} events in {time.perf_counter() - started:.0f}s")
        return total
    finally:
        await bus.close()


def main(events: int) -> None:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        nats = NatsServer(Path(tmp) / "nats").start()
        try:
            total = asyncio.run(fill(nats.url, events))
            out = Path(tmp) / "log.parquet"
            started = time.perf_counter()
            done = subprocess.run(
                [str(Path(sys.executable).parent / "jetdbt"), "audit", "export", "--out", str(out)],
                env={**os.environ, "NATS_URL": nats.url},
                capture_output=True,
                text=True,
                check=True,
            )
            elapsed = time.perf_counter() - started
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        finally:
            nats.stop()
        rows = pq.ParquetFile(out).metadata.num_rows
        print(done.stdout.strip())
        print(
            f"export: {rows} rows of {total} events in {elapsed:.0f}s ({rows / elapsed:.0f}/s),"
            f" {out.stat().st_size / 2**20:.0f} MB of Parquet"
        )
        verdict = "under" if peak_mb < LIMIT_MB else "OVER"
        print(f"export peak memory: {peak_mb:.0f} MB ({verdict} the {LIMIT_MB} MB limit)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)

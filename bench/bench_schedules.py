"""How soon a schedule's fire becomes a started run: the delay from the fire (the time the
NATS server stored the fire's run command) to the run's RunStarted, over N fires.

A stack this benchmark starts (its own nats-server, Postgres and DuckDB in a temporary
home) with the example deployed and one job, a `run-operation` of a macro that only
renders SQL (the cheapest dbt invocation it has), scheduled `@every JETDBT_BENCH_EVERY`
seconds (default 4) until JETDBT_BENCH_FIRES (default 50) fires have started. Each fire
is read from the log: `schedule.fired`'s `fired_at` (the fire message's own stream
timestamp) and its run's `run.started` `at`. The delay holds the runner taking the
command, reading the job, its plan, and admission; a fire that comes while the previous
run still holds the DuckDB file waits for it, so EVERY should exceed a run's length.

    python bench/bench_schedules.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from services import client
from services.stack import Stack
from shared import events as ev
from shared import logging as jlog
from shared import subjects
from shared.commands import JobCommand, JobSpec, OperationCommand
from shared.config import load

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "jaffle_shop"
PROJECT = "jaffle_shop"
FIRES = int(os.environ.get("JETDBT_BENCH_FIRES", "50"))
EVERY = int(os.environ.get("JETDBT_BENCH_EVERY", "4"))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench() -> None:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as home:
        stack = await Stack(load({"JETDBT_HOME": home, "JETDBT_API_PORT": "0"})).start()
        try:
            _, deployed = await client.deploy(stack.bus, EXAMPLE, PROJECT)
            assert isinstance(deployed, ev.Deployed), deployed
            spec = JobSpec(
                command=OperationCommand(
                    macro="cents_to_dollars", macro_args={"column_name": "amount"}
                )
            )
            for command in (
                JobCommand(action="save", name="bench", job=spec),
                JobCommand(action="schedule", name="bench", cron=f"@every {EVERY}s"),
            ):
                done = await client.job(stack.bus, PROJECT, command)
                assert not isinstance(done, ev.JobRefused), done
            delays = await _delays(stack.bus)
            await client.job(stack.bus, PROJECT, JobCommand(action="pause", name="bench"))
        finally:
            await stack.stop()
    print(
        f"fire to run started over {len(delays)} fires (@every {EVERY}s):"
        f" p50 {statistics.median(delays) * 1000:.0f} ms,"
        f" p99 {_pct(delays, 0.99) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms"
    )


async def _delays(bus) -> list[float]:
    """Seconds from each fire to its run's start, for the first FIRES fires."""
    delays: dict[str, float] = {}
    fired: dict[str, ev.ScheduleFired] = {}
    queue: asyncio.Queue = asyncio.Queue()

    async def collect(msg) -> None:
        queue.put_nowait(ev.decode(msg.data))

    subs = [
        await bus.follow(subjects.schedule_event(PROJECT, "bench", "fired"), collect),
        await bus.follow(f"dbt.evt.run.{PROJECT}.*.started", collect),
    ]
    started: dict[str, ev.RunStarted] = {}
    try:
        while len(delays) < FIRES:
            event = await asyncio.wait_for(queue.get(), 300)
            if isinstance(event, ev.ScheduleFired):
                fired[event.run_id] = event
            elif isinstance(event, ev.RunStarted):
                started[event.run_id] = event
            for run_id in set(fired) & set(started) - set(delays):
                delays[run_id] = (started[run_id].at - fired[run_id].fired_at).total_seconds()
    finally:
        for sub in subs:
            await sub.unsubscribe()
    return list(delays.values())


def main() -> None:
    asyncio.run(bench())


if __name__ == "__main__":
    main()

"""How soon a schedule's fire becomes a started run: the delay from the fire (the time the
NATS server stored the fire in DBT_SCHEDULES) to the run's RunStarted, over N fires, and of
it the hop until DBT_COMMANDS sourced the fire as a run command.

A stack this benchmark starts (its own nats-server, Postgres and DuckDB in a temporary
home) with the example deployed and one job, a `run-operation` of a macro that only
renders SQL (the cheapest dbt invocation it has), scheduled `@every JETDBT_BENCH_EVERY`
seconds (default 4) until JETDBT_BENCH_FIRES (default 50) fires have started. Each fire
is read from the log (`schedule.fired`, its run's `run.started` `at`) and from the streams:
the run command it became (`command_seq`, whose `Nats-Stream-Source` names the fire's own
sequence in DBT_SCHEDULES) and the fire itself, each with the time its stream stored it.
The delay holds the runner taking the
command, reading the job, its plan, and admission; a fire that comes while the previous
run still holds the DuckDB file waits for it, so EVERY should exceed a run's length.

    python bench/bench_schedules.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from datetime import datetime
from pathlib import Path

from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import JobCommand, JobSpec, OperationCommand
from jetdbt.shared.bus.streams import COMMANDS, SCHEDULES_STREAM
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

from tests.support.helpers import deploy_and_wait

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
        stack = await Stack(
            load(
                {"JETDBT_HOME": home, "JETDBT_API_PORT": "0", "SCHEDULE_MIN_INTERVAL_SECONDS": "1"}
            )
        ).start()
        try:
            await deploy_and_wait(stack.bus, EXAMPLE, PROJECT)
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
            delays, hops = await _delays(stack.bus)
            await client.job(stack.bus, PROJECT, JobCommand(action="pause", name="bench"))
        finally:
            await stack.stop()
    for what, values in (("fire to run started", delays), ("of it, fire to sourced", hops)):
        print(
            f"{what} over {len(values)} fires (@every {EVERY}s):"
            f" p50 {statistics.median(values) * 1000:.0f} ms,"
            f" p99 {_pct(values, 0.99) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"
        )


async def _fire_times(bus, fire: ev.ScheduleFired) -> tuple[datetime, datetime]:
    """When DBT_SCHEDULES stored the fire, and when DBT_COMMANDS stored it as a command."""
    command = await bus.js.get_msg(COMMANDS, fire.command_seq)
    source_seq = int((command.headers or {})["Nats-Stream-Source"].split()[1])
    original = await bus.js.get_msg(SCHEDULES_STREAM, source_seq)
    return original.time, command.time


async def _delays(bus) -> tuple[list[float], list[float]]:
    """Seconds from each fire to its run's start, and to its sourcing, for FIRES fires."""
    delays: dict[str, float] = {}
    hops: dict[str, float] = {}
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
                at, sourced = await _fire_times(bus, fired[run_id])
                delays[run_id] = (started[run_id].at - at).total_seconds()
                hops[run_id] = (sourced - at).total_seconds()
    finally:
        for sub in subs:
            await sub.unsubscribe()
    return list(delays.values()), list(hops.values())


def main() -> None:
    asyncio.run(bench())


if __name__ == "__main__":
    main()

"""Triggers: the delay from another system's declared write to the start of the run it
triggers, on a stack this benchmark starts (`jetdbt up`'s: its own nats-server with the
generated users, Postgres, the example project).

A job `feed` (a run-operation, the cheapest dbt invocation) lists the relation in
`on_relation`. Each write is published on the intake as an external system's user would,
and the next one only once the triggered run finished, so no run waits for a slot: the
figure is the path write -> runner's check (`relation.materialized`) -> triggers service
(`run.requested`) -> runner's start (`run.started`), each step timed by the server's own
stored timestamps.

    python bench/bench_triggers.py

JETDBT_BENCH_TRIGGER_WRITES (default 20) writes. A schedule's fire-to-start figure is
bench/bench_schedules.py's.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench_schedules import _pct
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.services.triggers.manager import run_id_for
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import JobCommand, JobSpec, OperationCommand
from jetdbt.shared.bus.stream_batches import last_matching
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.jobs.triggered_jobs import Armed
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load
from nats.js.api import ConsumerConfig, DeliverPolicy

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "jaffle_shop"
PROJECT = "jaffle_shop"
RELATION = "dbt://main/raw/bench_feed"
SPEC = JobSpec(
    command=OperationCommand(macro="cents_to_dollars", macro_args={"column_name": "amount"}),
    on_relation=[RELATION],
)


def _write() -> bytes:
    body = {
        "type": "relation.materialized.v1",
        "at": datetime.now(UTC).isoformat(),
        "relation": RELATION,
        "producer": "ingest",
    }
    return json.dumps(body).encode()


async def _stored(js) -> list:
    """Every message of the event log with its stored time, in order."""
    sub = await js.pull_subscribe(
        "dbt.evt.>", stream=EVENTS, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    found = []
    try:
        while True:
            try:
                found += await sub.fetch(500, timeout=1)
            except TimeoutError:
                return found
    finally:
        await sub.unsubscribe()


def _line(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"  {name:28} p50 {_pct(ms, 0.5):7.0f} ms   p99 {_pct(ms, 0.99):7.0f} ms"
        f"   mean {statistics.fmean(ms):7.0f} ms"
    )


async def main() -> int:
    writes = int(os.environ.get("JETDBT_BENCH_TRIGGER_WRITES") or 20)
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-triggers-") as tmp:
        settings = load({"JETDBT_HOME": str(Path(tmp) / "home"), "JETDBT_API_PORT": "0"})
        stack = await Stack(settings).start()
        try:
            bus = stack.bus
            _, deployed = await client.deploy(bus, EXAMPLE, PROJECT)
            if not isinstance(deployed, ev.Deployed):
                print(f"deploy failed: {deployed}", file=sys.stderr)
                return 1
            saved = await client.job(bus, PROJECT, JobCommand(action="save", name="feed", job=SPEC))
            if not isinstance(saved, ev.JobSaved):
                print(f"job save refused: {saved}", file=sys.stderr)
                return 1
            armed = Armed(PROJECT, "feed", 0, SPEC)
            recorded = 0
            for _ in range(writes):
                await bus.js.publish(subjects.intake_write("ingest", RELATION), _write())
                recorded = await _wait_recorded(bus, recorded)
                run_id = run_id_for("t", recorded, armed)
                await _wait(bus, subjects.run_event(PROJECT, run_id, "finished"))
            stored = await _stored(bus.js)
        finally:
            await stack.stop()
    _report(stored, armed)
    return 0


async def _wait(bus, subject: str, timeout: float = 300) -> ev.Event:
    async with asyncio.timeout(timeout):
        while (found := await bus.last_event(subject)) is None:
            await asyncio.sleep(0.05)
    return found


async def _wait_recorded(bus, after: int) -> int:
    """The event-log sequence of the next declared write a runner recorded past `after`
    (writes go one at a time, so it is the one just published)."""
    subject = subjects.relation_event(RELATION, "materialized")
    async with asyncio.timeout(60):
        while (seq := await last_matching(bus.js, EVENTS, subject)) <= after:
            await asyncio.sleep(0.02)
    return seq


def _report(stored: list, armed: Armed) -> None:
    at: dict[str, datetime] = {}
    writes = []
    for msg in stored:
        event = ev.decode(msg.data)
        seq, when = msg.metadata.sequence.stream, msg.metadata.timestamp
        if isinstance(event, ev.RelationMaterialized):
            writes.append((run_id_for("t", seq, armed), event.at, when))
        elif isinstance(event, ev.RunRequested | ev.RunStarted):
            at.setdefault(f"{event.run_id}:{type(event).__name__}", when)
    steps: dict[str, list[float]] = {"write -> recorded": [], "recorded -> run.requested": []}
    steps |= {"run.requested -> run.started": [], "write -> run.started": []}
    for run_id, written, recorded in writes:
        requested, started = at[f"{run_id}:RunRequested"], at[f"{run_id}:RunStarted"]
        steps["write -> recorded"].append((recorded - written).total_seconds())
        steps["recorded -> run.requested"].append((requested - recorded).total_seconds())
        steps["run.requested -> run.started"].append((started - requested).total_seconds())
        steps["write -> run.started"].append((started - written).total_seconds())
    print(f"triggers: {len(writes)} declared writes, one at a time, each starting job feed")
    for name, values in steps.items():
        print(_line(name, values))
    print(f"  load average (1 min): {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

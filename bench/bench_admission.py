"""Fair admission: how long team beta's one run waits to start while team alpha has 200 runs
queued, beside the same run with nothing else queued, in one run of this benchmark, on a
stack it starts (its own nats-server, Postgres and DuckDB files in a temporary home).

Three small generated projects, each building into its own DuckDB file: alpha's two and
beta's one. First beta's run alone (the baseline); then alpha's 200 runs, alternating its two
projects, so alpha holds its MAX_RUNS_PER_TEAM (2) slots and the rest wait; once alpha's
runs are all asked for, beta's second run. Each wait is from the run's command to its
`run.started`. Alpha's runs are not waited for: the stack stops once beta's run started.

    python bench/bench_admission.py

JETDBT_BENCH_ADMISSION_QUEUED (default 200) runs of alpha; MAX_QUEUED_RUNS_PER_TEAM is
raised to hold them all. Bounded: each wait gives up after 300 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import yaml
from gen_project import generate

from services.cli import client
from services.stack.composition import Stack
from shared import events as ev
from shared import identity
from shared import logging as jlog
from shared.commands import BuildCommand, RunCommand
from shared.config import load

TEAMS = {"ana": "alpha", "bo": "beta"}
PROJECTS = {"a1": "ana", "a2": "ana", "b1": "bo"}
GIVE_UP = 300.0  # seconds a wait is allowed before the benchmark stops


class Seen:
    """The run events of the stack, as they arrive."""

    def __init__(self):
        self.requested: dict[str, ev.RunRequested] = {}
        self.started: dict[str, ev.RunStarted] = {}
        self.queued: set[str] = set()
        self.ended: set[str] = set()
        self.changed = asyncio.Event()

    async def on_msg(self, msg) -> None:
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            event = ev.decode(msg.data)
            if isinstance(event, ev.RunRequested):
                self.requested[event.run_id] = event
            elif isinstance(event, ev.RunStarted):
                self.started[event.run_id] = event
            elif isinstance(event, ev.RunQueued):
                self.queued.add(event.run_id)
            elif isinstance(event, ev.RUN_ENDS):
                self.ended.add(event.run_id)
            self.changed.set()

    async def until(self, check) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GIVE_UP
        while not check():
            if loop.time() > deadline:
                raise TimeoutError(f"gave up after {GIVE_UP:.0f}s")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)

    def wait_of(self, run_id: str) -> float:
        """Seconds from the run's command to its start."""
        asked = self.requested[run_id]
        return (self.started[run_id].at - (asked.requested_at or asked.at)).total_seconds()


def _write_projects(home: Path) -> Path:
    """The projects and the warehouses file that gives each its own DuckDB file."""
    warehouses = {}
    for i, name in enumerate(PROJECTS):
        generate(home / name, 3, seed=i)
        (home / name / "jetdbt.yaml").write_text(f"profile:\n  warehouse: w{name}\n")
        warehouses[f"w{name}"] = {"type": "duckdb", "path": str(home / f"{name}.duckdb")}
    path = home / "warehouses.yaml"
    path.write_text(yaml.safe_dump({"warehouses": warehouses}))
    return path


async def _submit(stack: Stack, project: str, run_id: str) -> None:
    who = PROJECTS[project]
    cmd = RunCommand(command=BuildCommand(), run_id=run_id, requested_by=who)
    await stack.bus.publish_command("run", project, cmd, run_id, principal=who)


async def main() -> int:
    queued = int(os.environ.get("JETDBT_BENCH_ADMISSION_QUEUED") or 200)
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-admission-") as tmp:
        home = Path(tmp)
        settings = load(
            {
                "JETDBT_HOME": str(home / "home"),
                "JETDBT_API_PORT": "0",
                "JETDBT_WAREHOUSES": str(_write_projects(home)),
                "MAX_QUEUED_RUNS_PER_TEAM": str(queued + 10),
            }
        )
        stack = await Stack(settings).start()
        seen = Seen()
        try:
            for name, team in TEAMS.items():
                await identity.put_principal(stack.bus, identity.Principal(name=name, team=team))
            await stack.bus.nc.subscribe("dbt.evt.>", cb=seen.on_msg)
            for project in PROJECTS:
                _, deployed = await client.deploy(stack.bus, home / project, project)
                if not isinstance(deployed, ev.Deployed):
                    print(f"deploy of {project} failed: {deployed}", file=sys.stderr)
                    return 1
            await _submit(stack, "b1", "alone")
            await seen.until(lambda: "alone" in seen.ended)
            began = time.monotonic()
            storm = [f"alpha{i}" for i in range(queued)]
            for i, run_id in enumerate(storm):
                await _submit(stack, f"a{1 + i % 2}", run_id)
            await seen.until(lambda: all(r in seen.requested for r in storm))
            submitted = time.monotonic() - began
            await _submit(stack, "b1", "beside")
            await seen.until(lambda: "beside" in seen.started)
            waiting = sum(1 for r in storm if r not in seen.started and r not in seen.ended)
        finally:
            await stack.stop()
    print(
        f"admission: team beta's one run, team alpha {queued} runs asked for"
        f" ({submitted:.1f}s to publish and record them), MAX_CONCURRENT_RUNS"
        f" {settings.max_concurrent_runs}, MAX_RUNS_PER_TEAM {settings.max_runs_per_team}"
    )
    print(f"  beta alone:                {seen.wait_of('alone'):6.2f}s from command to start")
    print(
        f"  beta beside alpha's queue: {seen.wait_of('beside'):6.2f}s from command to start"
        f" ({waiting} of alpha's runs still waiting then)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Fair admission: how long team beta's one run waits to start while team alpha has 200 runs
queued, beside the same run with nothing else queued, in one run of this benchmark, on
stacks it starts (each its own nats-server, Postgres and DuckDB files in a temporary home).

Three small generated projects: alpha's two and beta's one. Twice: each project building
into a DuckDB file of its own, then all three into one file (as the default warehouse
does, one environment for every project). Each time, first beta's run alone (the
baseline); then alpha's 200 runs, alternating its two projects, so alpha holds what it may
and the rest wait; once alpha's runs are all asked for, beta's second run. Each wait is
from the run's command to its `run.started`. Alpha's runs are not waited for: the stack
stops once beta's run started.

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
from pathlib import Path

import msgspec
import yaml
from gen_project import generate
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.identity import principals
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

TEAMS = {"ana": "alpha", "bo": "beta"}
PROJECTS = {"a1": "ana", "a2": "ana", "b1": "bo"}
GIVE_UP = 300.0  # seconds a wait is allowed before the benchmark stops


class Seen:
    """The run events of the stack, as they arrive."""

    def __init__(self):
        self.requested: dict[str, ev.RunRequested] = {}
        self.started: dict[str, ev.RunStarted] = {}
        self.queued: set[str] = set()
        self.ended: dict[str, ev.Event] = {}
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
                self.ended[event.run_id] = event
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

    def longest_run(self, prefix: str) -> float:
        """Seconds of the longest run started and ended whose id starts with `prefix`."""
        return max(
            (
                (self.ended[r].at - started.at).total_seconds()
                for r, started in self.started.items()
                if r.startswith(prefix) and r in self.ended
            ),
            default=0.0,
        )


def _write_projects(home: Path, shared: bool) -> Path:
    """The projects and the warehouses file: a DuckDB file each, or one for all."""
    warehouses = {}
    for i, name in enumerate(PROJECTS):
        generate(home / name, 3, seed=i)
        file = "shared" if shared else name
        (home / name / "jetdbt.yaml").write_text(f"profile:\n  warehouse: w{file}\n")
        warehouses[f"w{file}"] = {"type": "duckdb", "path": str(home / f"{file}.duckdb")}
    path = home / "warehouses.yaml"
    path.write_text(yaml.safe_dump({"warehouses": warehouses}))
    return path


async def _submit(stack: Stack, project: str, run_id: str) -> None:
    who = PROJECTS[project]
    cmd = RunCommand(command=BuildCommand(), run_id=run_id, requested_by=who)
    await stack.bus.publish_command("run", project, cmd, run_id, principal=who)


async def scenario(queued: int, shared: bool) -> tuple[Seen, int]:
    """Beta alone, then beside alpha's `queued` runs; the events seen, and how many of
    alpha's runs still waited when beta's second run started."""
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-admission-") as tmp:
        home = Path(tmp)
        settings = load(
            {
                "JETDBT_HOME": str(home / "home"),
                "JETDBT_API_PORT": "0",
                "JETDBT_WAREHOUSES": str(_write_projects(home, shared)),
                "MAX_QUEUED_RUNS_PER_TEAM": str(queued + 10),
            }
        )
        stack = await Stack(settings).start()
        seen = Seen()
        try:
            for name, team in TEAMS.items():
                await principals.put_principal(
                    stack.bus, principals.Principal(name=name, team=team)
                )
            await stack.bus.nc.subscribe("dbt.evt.>", cb=seen.on_msg)
            for project in PROJECTS:
                _, deployed = await client.deploy(stack.bus, home / project, project)
                if not isinstance(deployed, ev.Deployed):
                    raise RuntimeError(f"deploy of {project} failed: {deployed}")
            await _submit(stack, "b1", "alone")
            await seen.until(lambda: "alone" in seen.ended)
            storm = [f"alpha{i}" for i in range(queued)]
            for i, run_id in enumerate(storm):
                await _submit(stack, f"a{1 + i % 2}", run_id)
            await seen.until(lambda: all(r in seen.requested for r in storm))
            await _submit(stack, "b1", "beside")
            await seen.until(lambda: "beside" in seen.started)
            return seen, sum(1 for r in storm if r not in seen.started and r not in seen.ended)
        finally:
            await stack.stop()


async def main() -> int:
    queued = int(os.environ.get("JETDBT_BENCH_ADMISSION_QUEUED") or 200)
    jlog.configure("warning")
    settings = load({})
    print(
        f"admission: team beta's one run beside team alpha's {queued} queued,"
        f" MAX_CONCURRENT_RUNS {settings.max_concurrent_runs},"
        f" MAX_RUNS_PER_TEAM {settings.max_runs_per_team}; from command to start"
    )
    for shared, what in ((False, "a DuckDB file each"), (True, "one DuckDB file for all")):
        seen, waiting = await scenario(queued, shared)
        print(
            f"  {what:24} beta alone {seen.wait_of('alone'):6.2f}s,"
            f" beside alpha's queue {seen.wait_of('beside'):6.2f}s"
            f" ({waiting} of alpha's runs still waiting then; alpha's longest run"
            f" {seen.longest_run('alpha'):.2f}s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Capacity under load: 40 short runs across 3 teams, submitted at once, on a stack this
benchmark starts (its own nats-server, Postgres and DuckDB files in a temporary home).

Six small generated projects, each building into its own DuckDB file (an environment
of its own); run i belongs to team i % 3 and project i % 6. Admission keeps at most
MAX_CONCURRENT_RUNS (4) running and MAX_RUNS_PER_TEAM (2) of a team, one build per
environment, so most runs queue. From the runs' events it prints slot occupancy over
time (global and per team, about 40 samples; the peaks from every second) and the
queueing delay: from a run's command to its start, for every run and for those that
queued.

    python bench/bench_capacity.py

JETDBT_BENCH_CAPACITY_RUNS (default 40) runs, JETDBT_BENCH_CAPACITY_MODELS (default 5)
models per project.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml
from gen_project import generate
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.identity import principals as identity
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

TEAMS = {"ana": "alpha", "bo": "beta", "cy": "gamma"}
PROJECTS = 6
ROWS = 40  # lines of the occupancy table


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _write_projects(home: Path, models: int) -> Path:
    """The projects and the warehouses file that gives each its own DuckDB file."""
    warehouses = {}
    for p in range(PROJECTS):
        generate(home / f"p{p}", models, seed=p)
        (home / f"p{p}" / "jetdbt.yaml").write_text(f"profile:\n  warehouse: w{p}\n")
        warehouses[f"w{p}"] = {"type": "duckdb", "path": str(home / f"w{p}.duckdb")}
    path = home / "warehouses.yaml"
    path.write_text(yaml.safe_dump({"warehouses": warehouses}))
    return path


def _running_at(spans: dict[str, tuple[datetime, datetime]], at: datetime) -> list[str]:
    return [run_id for run_id, (start, end) in spans.items() if start <= at < end]


def _report(events: list[ev.Event], team_of_run: dict[str, str], wall: float) -> None:
    requested = {e.run_id: e.requested_at or e.at for e in events if isinstance(e, ev.RunRequested)}
    started = {e.run_id: e.at for e in events if isinstance(e, ev.RunStarted)}
    finished = {e.run_id: e for e in events if isinstance(e, ev.RunFinished)}
    queued: dict[str, datetime] = {}
    for e in events:
        if isinstance(e, ev.RunQueued):
            queued.setdefault(e.run_id, e.at)
    spans = {r: (started[r], finished[r].at) for r in finished if r in started}
    origin = min(requested.values())
    end = max(f.at for f in finished.values())
    teams = sorted(set(team_of_run.values()))
    print(f"\n{'t (s)':>6}  {'running':>7}  " + "  ".join(f"{t:>6}" for t in teams))
    peak = {"all": 0, **{t: 0 for t in teams}}
    seconds = int((end - origin).total_seconds()) + 1
    shown = max(1, math.ceil(seconds / ROWS))
    for second in range(seconds):
        now = _running_at(spans, datetime.fromtimestamp(origin.timestamp() + second, UTC))
        per_team = {t: sum(1 for r in now if team_of_run[r] == t) for t in teams}
        peak["all"] = max(peak["all"], len(now))
        for t in teams:
            peak[t] = max(peak[t], per_team[t])
        if second % shown == 0:
            counts = "  ".join(f"{per_team[t]:>6}" for t in teams)
            print(f"{second:>6}  {len(now):>7}  {counts}  {'#' * len(now)}")
    waits = [(started[r] - requested[r]).total_seconds() for r in spans]
    queue_waits = [(started[r] - queued[r]).total_seconds() for r in spans if r in queued]
    statuses = [f.result.status for f in finished.values()]
    print(
        f"\n{len(finished)} runs in {wall:.1f}s, {statuses.count('passed')} passed;"
        f" {len(queued)} queued at least once"
        f" ({sum(isinstance(e, ev.RunQueued) for e in events)} run.queued events)"
    )
    print(
        f"peak running: {peak['all']} in all; per team "
        + ", ".join(f"{t} {peak[t]}" for t in teams)
    )
    print(
        f"queueing delay, command to start: mean {statistics.mean(waits):.2f}s,"
        f" max {max(waits):.2f}s over {len(waits)} runs"
    )
    if queue_waits:
        print(
            f"queueing delay of the runs that queued, first queued to start:"
            f" mean {statistics.mean(queue_waits):.2f}s over {len(queue_waits)} runs"
        )


async def main() -> int:
    runs = _env_int("JETDBT_BENCH_CAPACITY_RUNS", 40)
    models = _env_int("JETDBT_BENCH_CAPACITY_MODELS", 5)
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-capacity-") as tmp:
        home = Path(tmp)
        warehouses = _write_projects(home, models)
        settings = load(
            {
                "JETDBT_HOME": str(home / "home"),
                "JETDBT_API_PORT": "0",
                "JETDBT_WAREHOUSES": str(warehouses),
            }
        )
        stack = await Stack(settings).start()
        try:
            for name, team in TEAMS.items():
                await identity.put_principal(stack.bus, identity.Principal(name=name, team=team))
            for p in range(PROJECTS):
                _, deployed = await client.deploy(stack.bus, home / f"p{p}", f"p{p}")
                if not isinstance(deployed, ev.Deployed):
                    print(f"deploy of p{p} failed: {deployed}", file=sys.stderr)
                    return 1
            principals = list(TEAMS)
            events: list[ev.Event] = []

            async def keep(event: ev.Event) -> None:
                events.append(event)

            team_of_run = {}
            submitted = []
            began = time.monotonic()
            for i in range(runs):
                who = principals[i % len(principals)]
                run_id = f"cap{i}"
                team_of_run[run_id] = TEAMS[who]
                cmd = RunCommand(command=BuildCommand(), run_id=run_id, requested_by=who)
                submitted.append(
                    asyncio.create_task(
                        client.run(stack.bus, f"p{i % PROJECTS}", cmd, on_event=keep)
                    )
                )
            await asyncio.gather(*submitted)
            wall = time.monotonic() - began
        finally:
            await stack.stop()
    print(
        f"capacity: {runs} runs, 3 teams, {PROJECTS} environments,"
        f" MAX_CONCURRENT_RUNS {settings.max_concurrent_runs},"
        f" MAX_RUNS_PER_TEAM {settings.max_runs_per_team}"
    )
    _report(events, team_of_run, wall)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

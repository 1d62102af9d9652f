"""A fleet, measured: many teams running many small projects on 1, 2 and 4 runner processes,
side by side in one run of this benchmark, with what each predicts for 100,000 runs a day.

It starts a nats-server (with the generated users) and a Postgres in a temporary folder, and
`jetdbt serve projectors` and `jetdbt serve api` as processes of their own. The teams'
principals and API tokens are made as an operator makes them; each generated project (a
DuckDB file of its own) belongs to one team, deployed by its principal through a runner
process started for the deploys alone. Then per runner count: that many `jetdbt serve
runner` processes (each its own JETDBT_HOME, as on its own host; MAX_CONCURRENT_RUNS is
JETDBT_FLEET_SLOTS_PER_RUNNER times the count), the runs submitted evenly over the window,
alternately through the API (the team's token) and on NATS (the operator's connection
naming the team's principal), project by project in turn; then it waits for every run to
end (a run still going at three windows and five minutes is cancelled and counted).

Per runner count it prints: runs per minute (ended runs over first command to last end),
admission wait (RunRequested's command time to RunStarted) over all runs and per team (the
worst team's p50 and p99, the best team's p50), the progress projection's lag (an event's
stored time to the first sampled checkpoint past it, sampled every 50 ms), GET
/v1/runs/{id} answer times (a random submitted run every 200 ms, with its team's token),
each process's peak RSS, and the runners 100,000 runs a day needs at the pass's rate per
runner with every slot held (slots x 60 / mean run length, divided by the runners).

    python bench/bench_fleet.py

JETDBT_FLEET_TEAMS (20), JETDBT_FLEET_PROJECTS (100), JETDBT_FLEET_RUNS (1000),
JETDBT_FLEET_RUNNERS (1,2,4), JETDBT_FLEET_WINDOW_SECONDS (600),
JETDBT_FLEET_MODELS (10 per project) and JETDBT_FLEET_SLOTS_PER_RUNNER (2) choose the size;
a small pass: JETDBT_FLEET_TEAMS=4 JETDBT_FLEET_PROJECTS=8 JETDBT_FLEET_RUNS=60
JETDBT_FLEET_RUNNERS=1,2 JETDBT_FLEET_WINDOW_SECONDS=120.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import asyncpg
import msgspec
import proc_tree
import yaml
from fleet_figures import RUNS_PER_DAY, Figures, Seen, Sizes, figures, lags, sizes
from fleet_processes import Services
from gen_project import generate
from jetdbt.projections.loop import checkpoint
from jetdbt.services.access.local import nats_logins
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.services.stack.embedded import free_port, start_postgres
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, CancelCommand, RunCommand
from jetdbt.shared.identity import principals as identity
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

DEPLOYS_AT_ONCE = 8
LAG_EVERY = 0.05  # seconds between checkpoint samples
ANSWER_EVERY = 0.2  # seconds between run page requests
RSS_EVERY = 0.5  # seconds between peak-memory samples of dbt children
SCHEMA = "jetdbt"
PROGRESS = "progress"  # the projection a run page reads
PROGRESS_SUBJECTS = ("dbt.evt.run.", "dbt.evt.node.")


def _team(p: int, s: Sizes) -> int:
    return p % s.teams


def _principal(t: int) -> str:
    return f"fleet{t}"


class World:
    """The servers, the services and the teams, for every runner count of one run."""

    def __init__(self, work: Path, s: Sizes):
        self.work, self.s = work, s
        self.home = work / "home"
        self.stack: Stack | None = None
        self.pg = None
        self.database_url = ""
        self.api_url = ""
        self.tokens: dict[int, str] = {}  # team -> bearer
        self.services: Services | None = None
        self.logins: dict[str, str] = {}
        self.warehouses = work / "warehouses.yaml"

    def _write_projects(self) -> None:
        warehouses = {}
        for p in range(self.s.projects):
            folder = generate(self.work / "projects" / f"p{p:03d}", self.s.models, seed=p)
            (folder / "jetdbt.yaml").write_text(f"profile:\n  warehouse: w{p}\n")
            warehouses[f"w{p}"] = {"type": "duckdb", "path": str(self.work / f"w{p}.duckdb")}
        self.warehouses.write_text(yaml.safe_dump({"warehouses": warehouses}))

    async def start(self) -> None:
        self._write_projects()
        settings = load({"JETDBT_HOME": str(self.home), "JETDBT_WAREHOUSES": str(self.warehouses)})
        # NATS and the operator's connection only: every service is a process of its own.
        self.stack = await Stack(
            settings, runner=False, projectors=False, api=False, triggers=False, notifier=False
        ).start()
        self.pg, self.database_url = await asyncio.to_thread(start_postgres, self.home / "pg")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "DATABASE_"))}
        base.update(NATS_URL=self.stack.nats_url, JETDBT_WAREHOUSES=str(self.warehouses))
        self.services = Services(self.work, base)
        self.logins = nats_logins(self.home)
        db = {"DATABASE_URL": self.database_url, "JETDBT_SCHEMA": SCHEMA}
        self.services.start(
            "projectors",
            "projectors",
            {**db, **self._user("projector"), "JETDBT_HOME": str(self.work / "projectors")},
        )
        port = free_port()
        self.services.start(
            "api",
            "api",
            {
                **db,
                **self._user("api"),
                "JETDBT_HOME": str(self.work / "api"),
                "JETDBT_API_PORT": str(port),
                "JETDBT_MCP_PORT": str(free_port()),
            },
        )
        self.api_url = f"http://127.0.0.1:{port}"
        await self.services.said("projectors", "stack_started")
        await self.services.said("api", "stack_started")
        for t in range(self.s.teams):
            _, self.tokens[t] = await identity.create_token(
                self.stack.bus, principal=_principal(t), team=f"team{t}", role="runner"
            )

    def _user(self, user: str) -> dict[str, str]:
        return {"NATS_USER": user, "NATS_PASSWORD": self.logins[user]}

    async def start_runners(self, names: list[str], slots: int) -> None:
        """Runner processes, each its own home; once each said it started and their trees
        went quiet (the fork servers imported dbt and rehearsed a build)."""
        for name in names:
            self.services.start(
                name,
                "runner",
                {
                    **self._user("runner"),
                    "JETDBT_HOME": str(self.work / name),
                    "JETDBT_RUNNER_NAME": name,
                    "MAX_CONCURRENT_RUNS": str(slots),
                    # Each runner builds its own slots' worth, as a host with its own cores.
                    "MAX_RUNS_PER_RUNNER": str(self.s.slots_per_runner),
                    # Every run of a pass may wait at once: none is refused for the queue's size.
                    "MAX_QUEUED_RUNS_PER_TEAM": str(self.s.runs),
                },
            )
        for name in names:
            await self.services.said(name, "runner_started")
        pids = [self.services.pid(n) for n in names]
        for _ in range(120):
            before = proc_tree.cpu_seconds([p for r in pids for p in proc_tree.descendants(r)])
            await asyncio.sleep(1.0)
            after = proc_tree.cpu_seconds([p for r in pids for p in proc_tree.descendants(r)])
            if after - before < 0.1 * len(pids):
                return

    async def deploy(self) -> None:
        """Every project, by its team's principal, on a runner started for the deploys."""
        await self.start_runners(["runner-deploys"], self.s.slots_per_runner)
        at_once = asyncio.Semaphore(DEPLOYS_AT_ONCE)

        async def one(p: int) -> None:
            async with at_once:
                _, done = await client.deploy(
                    self.stack.bus,
                    self.work / "projects" / f"p{p:03d}",
                    f"p{p:03d}",
                    requested_by=_principal(_team(p, self.s)),
                )
            if not isinstance(done, ev.Deployed):
                raise RuntimeError(f"deploy of p{p:03d} failed: {done}")

        try:
            await asyncio.gather(*(one(p) for p in range(self.s.projects)))
        finally:
            self.services.stop(["runner-deploys"])

    async def close(self) -> None:
        try:
            if self.services is not None:
                self.services.stop_all()
            if self.stack is not None:
                await self.stack.stop()
        finally:
            if self.pg is not None:
                await asyncio.to_thread(self.pg.cleanup)


class Pass:
    """One runner count, the `k`-th: its runs submitted over the window, watched until they
    end (its runs and runners named for `k`, so a count listed twice is a pass of its own)."""

    def __init__(self, world: World, runners: int, k: int):
        self.w, self.s, self.runners = world, world.s, runners
        self.slots = world.s.slots_per_runner * runners
        self.names = [f"runner-pass{k}-{i}" for i in range(runners)]
        self.prefix = f"f{k}r"
        self.team_of: dict[str, str] = {}
        self.project_of: dict[str, int] = {}
        self.requested: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.ended: dict[str, tuple[float, str]] = {}
        self.stored: list[tuple[int, float]] = []  # progress events: (sequence, stored at)
        self.samples: list[tuple[float, int]] = []
        self.answers: list[float] = []
        self.other_answers = 0
        self.child_peak = 0.0
        self.changed = asyncio.Event()
        self.stop = asyncio.Event()

    async def on_event(self, msg) -> None:
        meta = msg.metadata
        if msg.subject.startswith(PROGRESS_SUBJECTS):
            self.stored.append((meta.sequence.stream, meta.timestamp.timestamp()))
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            event = ev.decode(msg.data)
            run_id = getattr(event, "run_id", "")
            if run_id not in self.team_of:
                return
            if isinstance(event, ev.RunRequested):
                self.requested[run_id] = (event.requested_at or event.at).timestamp()
            elif isinstance(event, ev.RunStarted):
                self.started[run_id] = event.at.timestamp()
            elif isinstance(event, ev.RUN_ENDS):
                status = getattr(getattr(event, "result", None), "status", "refused")
                self.ended[run_id] = (event.at.timestamp(), status)
                self.changed.set()

    async def _sample_checkpoints(self) -> None:
        conn = await asyncpg.connect(self.w.database_url, server_settings={"search_path": SCHEMA})
        try:
            while not self.stop.is_set():
                at = time.time()
                self.samples.append((at, await checkpoint(conn, PROGRESS)))
                await asyncio.sleep(LAG_EVERY)
        finally:
            await conn.close()

    async def _sample_run_pages(self) -> None:
        pick = random.Random(self.runners)
        async with aiohttp.ClientSession() as session:
            while not self.stop.is_set():
                await asyncio.sleep(ANSWER_EVERY)
                asked = list(self.requested)
                if not asked:
                    continue
                run_id = pick.choice(asked)
                token = self.w.tokens[_team(self.project_of[run_id], self.s)]
                began = time.perf_counter()
                try:
                    async with session.get(
                        f"{self.w.api_url}/v1/runs/{run_id}",
                        headers={"Authorization": f"Bearer {token}"},
                    ) as resp:
                        await resp.read()
                    ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    self.answers.append(time.perf_counter() - began)
                else:
                    self.other_answers += 1

    async def _sample_children(self) -> None:
        """The largest peak RSS of a dbt child any runner's fork server forked."""
        while not self.stop.is_set():
            for name in self.names:
                fork = self.w.services.fork_server(name)
                for pid in proc_tree.descendants(fork)[1:] if fork else []:
                    self.child_peak = max(self.child_peak, proc_tree.peak_rss_mb(pid))
            await asyncio.sleep(RSS_EVERY)

    async def _submit(self, i: int, session: aiohttp.ClientSession) -> None:
        p = i % self.s.projects
        t = _team(p, self.s)
        run_id = f"{self.prefix}{i:05d}"
        self.team_of[run_id], self.project_of[run_id] = f"team{t}", p
        project = f"p{p:03d}"
        if i % 2 == 0:
            body = msgspec.json.encode(RunCommand(command=BuildCommand(), run_id=run_id))
            async with session.post(
                f"{self.w.api_url}/v1/projects/{project}/runs",
                data=body,
                headers={"Authorization": f"Bearer {self.w.tokens[t]}"},
            ) as resp:
                if resp.status != 202:
                    raise RuntimeError(f"POST run {run_id}: {resp.status} {await resp.text()}")
        else:
            who = _principal(t)
            cmd = RunCommand(command=BuildCommand(), run_id=run_id, requested_by=who)
            await self.w.stack.bus.publish_command("run", project, cmd, run_id, principal=who)

    async def _cancel_the_rest(self) -> None:
        for run_id, p in self.project_of.items():
            if run_id not in self.ended:
                who = _principal(_team(p, self.s))
                project = f"p{p:03d}"
                cmd = CancelCommand(run_id=run_id, requested_by=who)
                await self.w.stack.bus.publish_command(
                    "cancel", project, cmd, run_id, principal=who
                )
        await self._until_ended(time.monotonic() + 120)

    async def _until_ended(self, deadline: float) -> bool:
        while len(self.ended) < len(self.team_of):
            if time.monotonic() > deadline:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)
        return True

    def _peaks(self) -> dict[str, float]:
        services = self.w.services
        return {
            "runner (largest)": max(proc_tree.peak_rss_mb(services.pid(n)) for n in self.names),
            "fork server (largest)": max(
                proc_tree.peak_rss_mb(services.fork_server(n) or 0) for n in self.names
            ),
            "dbt child (largest)": self.child_peak,
            "projectors": proc_tree.peak_rss_mb(services.pid("projectors")),
            "api": proc_tree.peak_rss_mb(services.pid("api")),
            "nats-server": proc_tree.peak_rss_mb(_pid_in(self.w.home / "nats/nats-server.pid")),
            "postgres (largest)": max(
                map(proc_tree.peak_rss_mb, proc_tree.descendants(_postmaster(self.w.home)))
            ),
        }

    def _reset_peaks(self) -> None:
        services = self.w.services
        for pid in [
            services.pid("projectors"),
            services.pid("api"),
            _pid_in(self.w.home / "nats/nats-server.pid"),
            *proc_tree.descendants(_postmaster(self.w.home)),
        ]:
            proc_tree.reset_peak(pid)

    async def run(self) -> Seen:
        load_before = os.getloadavg()[0]
        await self.w.start_runners(self.names, self.slots)
        self._reset_peaks()
        following = await self.w.stack.bus.follow("dbt.evt.>", self.on_event)
        samplers = [
            asyncio.create_task(self._sample_checkpoints()),
            asyncio.create_task(self._sample_run_pages()),
            asyncio.create_task(self._sample_children()),
        ]
        try:
            began = time.monotonic()
            async with aiohttp.ClientSession() as session:
                for i in range(self.s.runs):
                    await asyncio.sleep(max(0.0, began + i * self.s.window / self.s.runs
                                            - time.monotonic()))  # fmt: skip
                    await self._submit(i, session)
            if not await self._until_ended(began + 3 * self.s.window + 300):
                await self._cancel_the_rest()
            peaks = self._peaks()
        finally:
            self.stop.set()
            await asyncio.gather(*samplers, return_exceptions=True)
            await following.unsubscribe()
            self.w.services.stop(self.names)
        return Seen(
            runners=self.runners,
            slots=self.slots,
            team_of=self.team_of,
            requested=self.requested,
            started=self.started,
            ended=self.ended,
            lags=lags(sorted(self.stored), self.samples),
            events=len(self.stored),
            answers=self.answers,
            other_answers=self.other_answers,
            peak_mb=peaks,
            load=(load_before, os.getloadavg()[0]),
        )


def _pid_in(file: Path) -> int:
    return int(file.read_text().split()[0])


def _postmaster(home: Path) -> int:
    return _pid_in(home / "pg" / "postmaster.pid")


def _cells(values: list[str]) -> str:
    """One column per runner count, a space before each so wide figures never run together."""
    return "".join(f" {v:>15}" for v in values)


def _print(s: Sizes, seen: list[Seen], rows: list[Figures]) -> None:
    def ms(x: float) -> str:
        return "-" if math.isnan(x) else f"{x * 1000:.0f}"

    def sec(x: float) -> str:
        return "-" if math.isnan(x) else f"{x:.2f}"

    print(
        f"\nfleet: {s.teams} teams, {s.projects} projects of {s.models} models (a DuckDB file"
        f" each), {s.runs} runs submitted over {s.window} s per runner count (half through"
        f" the API, half on NATS); MAX_CONCURRENT_RUNS {s.slots_per_runner} per runner\n"
    )
    table = [
        ("runners", [str(x.runners) for x in seen]),
        ("runs/min", [f"{r.runs_per_min:.1f}" for r in rows]),
        ("run and node events/min", [f"{r.events_per_min:.0f}" for r in rows]),
        ("ended passed/other/never", [f"{r.passed}/{r.other_ends}/{r.never_ended}" for r in rows]),
        ("run slots, busy %", [f"{r.slots}, {r.busy * 100:.0f}%" for r in rows]),
        ("mean run, start-end s", [sec(r.mean_run) for r in rows]),
        ("admission wait p50/p99 s", [f"{sec(r.wait_p50)}/{sec(r.wait_p99)}" for r in rows]),
        ("worst team p50/p99 s",
         [f"{sec(r.worst_team_p50)}/{sec(r.worst_team_p99)}" for r in rows]),
        ("team p50 best..worst s",
         [f"{sec(r.best_team_p50)}..{sec(r.worst_team_p50)}" for r in rows]),
        ("projection lag p50/p99 ms", [f"{ms(r.lag_p50)}/{ms(r.lag_p99)}" for r in rows]),
        ("GET run p50/p99 ms", [f"{ms(r.api_p50)}/{ms(r.api_p99)}" for r in rows]),
        ("  answers 200 (not 200)", [f"{len(x.answers)} ({x.other_answers})" for x in seen]),
        *(
            (f"peak RSS MB {kind}", [f"{x.peak_mb[kind]:.0f}" for x in seen])
            for kind in seen[0].peak_mb
        ),
        ("load average start/end", [f"{x.load[0]:.1f}/{x.load[1]:.1f}" for x in seen]),
        ("runs/min, every slot held", [f"{r.full_slots_per_min:.1f}" for r in rows]),
        (f"runners for {RUNS_PER_DAY:,}/day", [str(r.runners_for_a_day) for r in rows]),
    ]  # fmt: skip
    for label, values in table:
        print(f"{label:36}{_cells(values)}")
    print(
        f"\n{RUNS_PER_DAY:,} runs a day is {RUNS_PER_DAY / 1440:.1f} runs/min; each count's"
        " runners are its runs/min with every slot held, per runner, on this machine's share"
    )


async def bench(s: Sizes) -> None:
    work = Path(tempfile.mkdtemp(prefix="jetdbt-bench-fleet-"))
    # Removed at exit after pgserver's own exit handler, which touches its runtime folder here
    # (handlers run last registered first).
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    world = World(work, s)
    try:
        await world.start()
        await world.deploy()
        seen = []
        for k, runners in enumerate(s.runners):
            seen.append(await Pass(world, runners, k).run())
            r = figures(seen[-1])
            print(f"  {runners} runner(s): {r.runs_per_min:.1f} runs/min", file=sys.stderr)
    finally:
        await world.close()
    _print(s, seen, [figures(x) for x in seen])


def main() -> int:
    try:
        s = sizes(os.environ)
    except ValueError as exc:
        print(f"bench_fleet: {exc}", file=sys.stderr)
        return 2
    jlog.configure("warning")

    async def stoppable() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: the `finally`s stop it all
            loop.add_signal_handler(sig, task.cancel)
        await bench(s)

    try:
        asyncio.run(stoppable())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("bench_fleet: stopped; every process it started is stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

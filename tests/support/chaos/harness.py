"""What every chaos experiment shares: a world to break, runs to judge, the tally they fill.

A world is one NATS (an embedded server or a three-node cluster), a schema in the
suite's Postgres, an in-process stack (the roles an experiment does not run as
separate processes), and the example project with the gate model that holds a build
open until the experiment has done its damage. Runs are judged from the log and the
API only, never from the harness's own memory: the log says whether a run finished
and which node events it holds, the API whether the projections caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from jetdbt.services.audit import run_history as audit
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.services.stack.embedded import NatsServer
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.process.config import Settings, load

from tests.support.cluster import NatsCluster, replicate
from tests.support.gate import GATE_MODEL
from tests.support.helpers import get_json, jetdbt, use_token, wait_for
from tests.support.paths import EXAMPLE

__all__ = [
    "GATE",
    "ORPHAN_RESOLUTION",
    "ZERO_COLUMNS",
    "Tally",
    "World",
    "open_world",
    "gate_project",
    "gated_runs",
    "start_cluster",
    "stop_process",
    "timed",
]

GATE = "model.jaffle_shop.gate"
PROJECT = "chaos"
BUILT = ("model", "seed", "snapshot", "test")  # what `dbt build` runs
# How finely the orphan's lifetime is told. dbt dies by a chain of parent-death signals
# (runner, then its forkserver, then dbt), each sent once the kernel has freed the dying
# parent's memory: tens of milliseconds, past 0.1 s on a busy machine. An orphan that
# goes on building lives for seconds.
ORPHAN_RESOLUTION = 0.5
# Columns that must read zero after every experiment.
ZERO_COLUMNS = (
    "failed_wrongly",
    "stuck",
    "nodes_missing",
    "nodes_duplicated",
    "overlaps",
    "orphan_seconds",
    "replay_differences",
)
RUN_SECONDS = 240.0  # the longest a run may take to finish before it counts as stuck
PROJECTED_SECONDS = 30.0  # the longest the API may lag behind a finished run


@dataclass
class Tally:
    """One experiment's row of the table."""

    experiment: str
    key: str = ""  # the experiment's name in the suite (runner, nats, ...)
    started: int = 0
    passed: int = 0
    failed_wrongly: int = 0
    stuck: int = 0
    nodes_missing: int = 0
    nodes_duplicated: int = 0
    overlaps: int = 0
    orphan_seconds: float = 0.0  # the longest an orphaned dbt outlived its runner
    replay_differences: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    intervals: list[tuple[datetime, datetime]] = field(default_factory=list)

    def violations(self) -> dict[str, float]:
        """The columns that must be zero and are not (an orphan under the resolution is 0)."""
        found = {c: getattr(self, c) for c in ZERO_COLUMNS if getattr(self, c)}
        if self.orphan_seconds < ORPHAN_RESOLUTION:
            found.pop("orphan_seconds", None)
        return found

    def note(self, text: str) -> None:
        self.notes.append(text)

    def count_overlaps(self) -> None:
        """Pairs of runs whose builds (first node event to last) overlap in time."""
        self.overlaps = sum(
            a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(self.intervals, 2)
        )


def gate_project(dest: Path, release: Path) -> Path:
    """The example project plus the gate model, which waits for `release` to exist."""
    shutil.copytree(EXAMPLE, dest)
    (dest / "models" / "marts" / "gate.py").write_text(GATE_MODEL)
    (dest / "models" / "marts" / "gate.yml").write_text(
        f"models:\n  - name: gate\n    config:\n      release_file: '{release}'\n"
    )
    return dest


async def start_cluster(
    folder: Path, host: str = "127.0.0.1", overrides: dict | None = None
) -> NatsCluster:
    """A three-node cluster with the contract's streams and buckets at three replicas, its
    clients' port on `host`; `overrides` the consumer settings a deployment tunes
    (`jetdbt.shared.bus.contract.consumer_overrides`: the runners' ack wait), which whoever creates
    the consumers chooses."""
    cluster = await asyncio.to_thread(NatsCluster(folder, host=host).start)
    try:
        bus = await connect(cluster.url, "chaos-replicate", ensure=False)
        try:
            await replicate(bus.js, overrides=overrides)
        finally:
            await bus.close()
    except BaseException:
        await asyncio.to_thread(cluster.stop)
        raise
    return cluster


@dataclass
class World:
    folder: Path
    settings: Settings
    stack: Stack
    release: Path
    project_dir: Path
    nats: NatsServer | None = None
    cluster: NatsCluster | None = None
    expected: frozenset[str] = frozenset()
    project: str = PROJECT

    @property
    def warehouses(self) -> Path:
        return self.settings.warehouses_file

    async def deploy(self) -> None:
        """Deploy the gate project (a runner must be up) and learn which nodes a build runs."""
        _, deployed = await client.deploy(self.stack.bus, self.project_dir, self.project)
        if not isinstance(deployed, ev.Deployed):
            raise RuntimeError(f"the chaos project did not deploy: {deployed}")
        manifest = json.loads(await self.stack.bus.get_blob(deployed.manifest_digest))
        self.expected = frozenset(
            uid for uid, node in manifest["nodes"].items() if node["resource_type"] in BUILT
        )

    async def start(self, tally: Tally, run_id: str) -> str:
        """Ask for a build on NATS, as any other system would."""
        command = RunCommand(command=BuildCommand(), run_id=run_id, requested_by="chaos")
        await self.stack.bus.publish_command(
            "run", self.project, command, run_id, principal="chaos"
        )
        tally.started += 1
        return run_id

    async def _history(self, run_id: str) -> audit.RunHistory | None:
        with contextlib.suppress(Exception):  # not there yet, or NATS away for a moment
            return await audit.run_history(self.stack.bus, run_id, self.project)
        return None

    async def gate_running(self, run_id: str, timeout: float = 120.0) -> bool:
        """The gate model has started and not finished, read from the log."""

        async def started():
            history = await self._history(run_id)
            if history is None:
                return False
            types = Counter(
                (e.type, e.payload.get("unique_id") or e.payload.get("node", {}).get("unique_id"))
                for e in history.entries
                if isinstance(e.payload, dict) and (e.type or "").startswith("node.")
            )
            return types[("node.started.v1", GATE)] > types[("node.finished.v1", GATE)]

        with contextlib.suppress(TimeoutError):
            return await wait_for(started, timeout=timeout, interval=0.3)
        return False

    async def finished(self, run_id: str, timeout: float = RUN_SECONDS) -> ev.RunFinished | None:
        """The run's RunFinished, read from the log (None if it did not come in time)."""
        subject = subjects.run_event(self.project, run_id, "finished")

        async def final():
            with contextlib.suppress(Exception):
                return await self.stack.bus.last_event(subject)
            return None

        with contextlib.suppress(TimeoutError):
            return await wait_for(final, timeout=timeout, interval=0.5)
        return None

    async def projected(self, run_id: str, status: str, timeout: float = PROJECTED_SECONDS):
        """The API's view of a run once it shows `status`, else None."""
        url = f"{self.stack.api_url}/v1/runs/{run_id}"

        async def shown():
            with contextlib.suppress(Exception):
                code, body = await get_json(url)
                return body if code == 200 and body.get("status") == status else None
            return None

        with contextlib.suppress(TimeoutError):
            return await wait_for(shown, timeout=timeout, interval=0.5)
        return None

    async def _api_view(self, run_id: str) -> str:
        """What the API says of a run and of the projections' lag, for a note."""
        try:
            _, run = await get_json(f"{self.stack.api_url}/v1/runs/{run_id}")
            _, lags = await get_json(f"{self.stack.api_url}/v1/projections")
        except Exception as exc:
            return f"the API did not answer ({exc.__class__.__name__})"
        lagging = {
            p["projection"]: (p["lag"], p["dead_letters"])
            for p in lags.get("projections", [])
            if p["lag"] or p["dead_letters"]
        }
        return f"status {run.get('status')!r}, projections behind (lag, dead letters): {lagging}"

    async def judge(self, tally: Tally, run_id: str, timeout: float = RUN_SECONDS) -> None:
        """Every run must pass, show every node in the API with none running, and hold
        each node's finish once per attempt in the log."""
        final = await self.finished(run_id, timeout)
        if final is None:
            tally.stuck += 1
            tally.note(f"{run_id}: no RunFinished within {timeout:.0f}s")
            return
        if final.result.status == "passed":
            tally.passed += 1
        else:
            tally.failed_wrongly += 1
            tally.note(f"{run_id}: {final.result.status}: {(final.result.error or '')[:160]}")
        body = await self.projected(run_id, final.result.status)
        if body is None:
            tally.stuck += 1
            seen = await self._api_view(run_id)
            tally.note(f"{run_id}: the API did not show it {final.result.status}: {seen}")
            return
        running = [n["unique_id"] for n in body["nodes"] if n["status"] == "running"]
        if running:
            tally.stuck += 1
            tally.note(f"{run_id}: still running in the API: {', '.join(running)}")
        shown = Counter(n["unique_id"] for n in body["nodes"])
        result = Counter(n.unique_id for n in final.result.nodes)
        missing = self.expected - set(shown)
        if missing:
            tally.note(f"{run_id}: missing in the API: {', '.join(sorted(missing))}")
        tally.nodes_missing += len(missing)
        tally.nodes_duplicated += sum(c - 1 for c in (*shown.values(), *result.values()) if c > 1)
        history = await self._history(run_id)
        if history is None:
            tally.note(f"{run_id}: its history could not be read")
            return
        node_entries = [e for e in history.entries if (e.type or "").startswith("node.")]
        finishes = Counter(
            (e.payload["attempt"], e.payload["node"]["unique_id"], e.payload["node"]["round"])
            for e in node_entries
            if e.type == "node.finished.v1"
        )
        doubled = sum(c - 1 for c in finishes.values() if c > 1)
        if doubled:
            tally.note(f"{run_id}: {doubled} node finishes stored twice in one attempt")
        tally.nodes_duplicated += doubled
        if node_entries:
            tally.intervals.append((node_entries[0].time, node_entries[-1].time))

    async def replay(self, tally: Tally) -> None:
        """`jetdbt replay --all`, as an operator runs it; its differences go in the tally."""
        done = await jetdbt(self.stack, "replay", "--all")
        found = re.search(r"^(\d+) differences$", done.stdout, re.M)
        if found is None:
            tally.replay_differences += 1
            tally.note(f"replay failed ({done.returncode}): {done.stderr.strip()[-300:]}")
            return
        tally.replay_differences += int(found.group(1))
        if int(found.group(1)):
            tally.note("replay: " + " | ".join(done.stdout.splitlines()[-12:]))


async def gated_runs(
    w: World, tally: Tally, count: int, prefix: str, damage: Callable[[str], Awaitable[None]]
) -> None:
    """`count` builds one after another, each held at the gate while `damage(run_id)` breaks
    something (it releases the gate when it wants the build to go on), then judged; a
    replay of the whole log after the last."""
    for k in range(count):
        w.release.unlink(missing_ok=True)
        run_id = await w.start(tally, f"{prefix}{k}")
        if await w.gate_running(run_id):
            await damage(run_id)
        else:
            tally.note(f"{run_id}: the gate never ran; nothing was broken")
        w.release.touch()
        await w.judge(tally, run_id)
    await w.replay(tally)


def stop_process(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM a service process started in its own session, SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.asynccontextmanager
async def open_world(
    root: Path,
    name: str,
    pg_url: str,
    *,
    cluster: bool = False,
    runner: bool = True,
    projectors: bool = True,
    env: dict[str, str] | None = None,
):
    """A fresh NATS (or cluster), a fresh schema and a stack with the roles asked for.

    `env` adds settings (RUN_ACK_WAIT_SECONDS, MAX_CONCURRENT_RUNS, ...). The project is
    not deployed yet: an experiment whose runners are processes starts them first.
    """
    folder = root / name
    folder.mkdir(parents=True)
    nats_server = nats_cluster = None
    if cluster:
        nats_cluster = await start_cluster(folder / "cluster")
        nats_url = nats_cluster.url
    else:
        nats_server = NatsServer(folder / "nats").start()
        nats_url = nats_server.url
    # One warehouse file for every runner of the world. Not main.duckdb: a database named
    # `main` beside the schema `main` makes dbt-duckdb miss existing seeds (see Settings).
    warehouses = folder / "warehouses.yaml"
    warehouses.write_text(
        yaml.safe_dump(
            {"warehouses": {"main": {"type": "duckdb", "path": str(folder / "wh.duckdb")}}}
        )
    )
    folder.chmod(0o755)  # runs read the gate's release file here, as their sandbox uid
    settings = load(
        {
            "JETDBT_HOME": str(folder / "home"),
            "JETDBT_SANDBOX_READ": str(folder),
            "NATS_URL": nats_url,
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"chaos_{name}_{uuid.uuid4().hex[:8]}",
            "JETDBT_API_PORT": "0",
            "JETDBT_WAREHOUSES": str(warehouses),
            **(env or {}),
        }
    )
    release = folder / "release"
    stack = None
    try:
        stack = await Stack(settings, runner=runner, projectors=projectors).start()
        # Outside pytest no conftest records the admin token: the harness reads its API with it.
        use_token(stack.api_url, stack.admin_token)
        yield World(
            folder=folder,
            settings=settings,
            stack=stack,
            release=release,
            project_dir=gate_project(folder / "project", release),
            nats=nats_server,
            cluster=nats_cluster,
        )
    finally:
        release.touch()  # a gate still waiting lets its build end
        if stack is not None:
            await stack.stop()
        if nats_cluster is not None:
            await asyncio.to_thread(nats_cluster.stop)
        if nats_server is not None:
            await asyncio.to_thread(nats_server.stop)


async def timed(tally: Tally, experiment, budget: float) -> Tally:
    """Run one experiment within its time budget; what it leaves unfinished is a note."""
    began = time.monotonic()
    budgeted = asyncio.timeout(budget)
    try:
        async with budgeted:
            await experiment(tally)
    except Exception as exc:  # the suite goes on to the next experiment and says why
        if budgeted.expired():
            tally.note(f"stopped at its budget of {budget:.0f}s")
        else:
            tally.note(f"experiment failed: {exc.__class__.__name__}: {str(exc)[:300]}")
        # Runs it started and never judged count as stuck.
        tally.stuck += max(0, tally.started - tally.passed - tally.failed_wrongly - tally.stuck)
    tally.count_overlaps()
    tally.seconds = time.monotonic() - began
    return tally

"""How jetdbt's cost grows with the project: `jetdbt run` against plain `dbt build` at
50, 500 and 5,000 generated models, side by side in one run, with memory and CPU beside
each, and the first answer of the project's graph at the largest size.

- plain `dbt build`: a person's CLI in a project folder of its own, warm (built once
  before timing, or at sizes above JETDBT_SCALE_WARM_BUILD_UP_TO parsed once: a build
  there takes minutes, and the partial-parse file is what makes a folder warm);
- `jetdbt run NAME --json`: the CLI against `jetdbt up` started by this benchmark as its
  own process tree (nats-server, Postgres, the runner with its fork server, the
  projectors and the API) in a temporary home, each project deployed (and below the same
  size built once) before timing.

Timed builds alternate (plain first, then jetdbt, then the other way round), so a busy
machine weighs on both alike. Memory is peak RSS: plain dbt's own; for jetdbt the dbt
child the runner forked for the build, and the `jetdbt up` process (runner, projectors
and API are one process there), each reset before the build so a deploy's peak is not
counted (a forked child shares its parent's pages: RSS counts them in both). CPU is user
and system seconds: plain dbt's, and every process under `jetdbt up` plus the CLI's
over the build. The graph's first answer is GET /v1/projects/{p}/graph for a page the
API has not seen (each sample asks a `limit` it was not asked before, still the whole
graph), beside the cached answer.

    python bench/bench_scale.py

JETDBT_SCALE_SIZES (default 50,500,5000), JETDBT_SCALE_REPS (timed pairs per size,
default 3,2,1; 0 deploys the size and builds nothing: `JETDBT_SCALE_SIZES=5000
JETDBT_SCALE_REPS=0` measures the graph alone), JETDBT_SCALE_WARM_BUILD_UP_TO (default
1000 models), JETDBT_SCALE_GRAPH_SAMPLES (default 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import NamedTuple

import aiohttp
import msgspec
import proc_tree
from bench_overhead import Plain
from gen_project import generate

from services.access.local import cli_token
from services.api.graph_routes import NODES_PER_PAGE
from services.stack.stack_file import read_stack_file
from shared.config import load

BIN = Path(sys.executable).parent
GOALS = {50: 0.3, 500: 0.8, 5000: 0.85}  # jetdbt run / plain dbt build, at most
GOAL_GRAPH_FIRST = 0.100
SAMPLE_SECONDS = 0.2
FORKSERVER = "services.runner.process.forkserver"


def _ints(name: str, default: str) -> list[int]:
    return [int(x) for x in (os.environ.get(name) or default).split(",") if x.strip()]


class Cost(NamedTuple):
    seconds: float
    cpu: float  # user + system seconds
    peak_mb: float


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> Cost:
    """Run `argv` to its end; its wall time, and its own CPU and peak RSS (wait4)."""
    print(f"  {Path(argv[0]).name} {' '.join(argv[1:3])} ...", end="", flush=True, file=sys.stderr)
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    print(f" {elapsed:.2f} s", file=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {out[-3000:].decode()}")
    return Cost(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


class JetdbtCost(NamedTuple):
    seconds: float
    stack_cpu: float  # every process under `jetdbt up`, and the CLI
    dbt_peak_mb: float  # the dbt child the runner forked for the build
    up_peak_mb: float  # the `jetdbt up` process: runner, projectors, API
    forkserver_peak_mb: float


class Up:
    """`jetdbt up` as a person starts it, in its own home, as its own process tree."""

    def __init__(self, home: Path):
        self.home = home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "DATABASE_"))}
        self.env.update(JETDBT_HOME=str(home), JETDBT_API_PORT="0")
        self.proc: subprocess.Popen | None = None
        self.api_url = ""
        self.headers: dict[str, str] = {}

    async def start(self) -> None:
        self.home.mkdir(parents=True)
        log = open(self.home.parent / "up.log", "wb")  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [str(BIN / "jetdbt"), "up"], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        for _ in range(1200):
            found = read_stack_file(self.home)
            if found and found.get("api_url"):
                self.api_url = found["api_url"]
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"jetdbt up exited {self.proc.returncode}: see up.log")
            await asyncio.sleep(0.1)
        token = cli_token(load({"JETDBT_HOME": str(self.home)}))
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def cli(self, *args: str) -> Cost:
        return _run([str(BIN / "jetdbt"), *args], self.env, self.home)

    def _forkserver(self) -> int | None:
        for pid in proc_tree.descendants(self.proc.pid):
            if FORKSERVER in proc_tree.cmdline(pid):
                return pid
        return None

    async def build(self, name: str) -> JetdbtCost:
        root = self.proc.pid
        fork = self._forkserver()
        for pid in (root, fork):
            if pid is not None:
                proc_tree.reset_peak(pid)
        before = proc_tree.cpu_seconds(proc_tree.descendants(root))
        peaks = {"dbt": 0.0, "up": 0.0, "fork": 0.0}
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal fork
            while not done.is_set():
                fork = fork or self._forkserver()
                if fork is not None:
                    peaks["fork"] = max(peaks["fork"], proc_tree.peak_rss_mb(fork))
                    for pid in proc_tree.descendants(fork)[1:]:
                        peaks["dbt"] = max(peaks["dbt"], proc_tree.peak_rss_mb(pid))
                peaks["up"] = max(peaks["up"], proc_tree.peak_rss_mb(root))
                await asyncio.sleep(SAMPLE_SECONDS)

        sampler = asyncio.create_task(sample())
        try:
            cli = await asyncio.to_thread(
                self.cli, "run", name, "--json", "--run-id", uuid.uuid4().hex
            )
        finally:
            done.set()
            await sampler
        after = proc_tree.cpu_seconds(proc_tree.descendants(root))
        return JetdbtCost(
            cli.seconds, after - before + cli.cpu, peaks["dbt"], peaks["up"], peaks["fork"]
        )

    async def graph_answers(self, project: str, samples: int) -> tuple[list[float], float, int]:
        """`samples` first answers of the project's graph (pages the API has not seen),
        the median cached answer, and how many nodes the page holds."""
        url = f"{self.api_url}/v1/projects/{project}/graph"
        firsts, cached = [], []
        async with aiohttp.ClientSession(headers=self.headers) as session:
            for _ in range(600):
                async with session.get(url, params={"limit": "1"}) as resp:
                    if resp.status == 200:
                        break
                await asyncio.sleep(0.1)
            for i in range(samples):
                t = time.perf_counter()
                async with session.get(url, params={"limit": str(NODES_PER_PAGE - i)}) as resp:
                    body = await resp.read()
                    assert resp.status == 200, body[:200]
                firsts.append(time.perf_counter() - t)
            for _ in range(max(samples, 5)):
                t = time.perf_counter()
                async with session.get(url, params={"limit": str(NODES_PER_PAGE)}) as resp:
                    await resp.read()
                cached.append(time.perf_counter() - t)
        nodes = len(msgspec.json.decode(body)["nodes"])
        return firsts, statistics.median(cached), nodes


class Row(NamedTuple):
    models: int
    nodes: int
    pairs: int
    plain: Cost
    jet: JetdbtCost
    deploy_s: float


async def _size(work: Path, up: Up, models: int, pairs: int, warm_up_to: int) -> Row | None:
    """The size's row; None with no pair asked for (the project deployed, for its graph)."""
    source = generate(work / "source" / f"bench_{models}", models)
    name = f"bench_{models}"
    plain = Plain(work, source, "bench")
    deploy = up.cli("deploy", str(source), "--project", name)
    if pairs == 0:
        return None
    if models <= warm_up_to:
        _run(plain.argv, plain.env, plain.project)
        await up.build(name)
    else:
        parse = [plain.argv[0], "parse", *plain.argv[2:]]
        _run(parse, plain.env, plain.project)
    plain_costs, jet_costs = [], []
    for i in range(pairs):
        if i % 2 == 0:
            plain_costs.append(_run(plain.argv, plain.env, plain.project))
            jet_costs.append(await up.build(name))
        else:
            jet_costs.append(await up.build(name))
            plain_costs.append(_run(plain.argv, plain.env, plain.project))
    nodes = _node_count(up, name)
    return Row(models, nodes, pairs, _median(plain_costs), _median(jet_costs), deploy.seconds)


def _node_count(up: Up, name: str) -> int:
    """The nodes of the project's latest run, from the API."""
    request = urllib.request.Request(f"{up.api_url}/v1/projects/{name}/runs", headers=up.headers)
    with urllib.request.urlopen(request, timeout=30) as resp:
        runs = msgspec.json.decode(resp.read())["runs"]
    return max((r.get("nodes_finished") or 0) for r in runs) if runs else 0


def _median(costs: list):
    return type(costs[0])(*(statistics.median(c[i] for c in costs) for i in range(len(costs[0]))))


async def bench() -> None:
    sizes = _ints("JETDBT_SCALE_SIZES", "50,500,5000")
    reps = _ints("JETDBT_SCALE_REPS", "3,2,1")
    warm_up_to = _ints("JETDBT_SCALE_WARM_BUILD_UP_TO", "1000")[0]
    samples = _ints("JETDBT_SCALE_GRAPH_SAMPLES", "5")[0]
    rows, graph = [], None
    with tempfile.TemporaryDirectory(prefix="jetdbt-scale-") as tmp:
        work = Path(tmp)
        up = Up(work / "home")
        try:
            await up.start()
            for i, models in enumerate(sizes):
                pairs = reps[min(i, len(reps) - 1)]
                row = await _size(work, up, models, pairs, warm_up_to)
                rows += [row] if row else []
                _print(rows, graph)
            graph = await up.graph_answers(f"bench_{sizes[-1]}", samples)
        finally:
            with contextlib.suppress(Exception):
                up.stop()
    _print(rows, graph, sizes[-1])


def _print(rows: list[Row], graph, largest: int | None = None) -> None:
    print("\njetdbt run against plain dbt build, by project size (median of the timed pairs)\n")
    print(f"{'models':>6} {'nodes':>6} {'pairs':>5} {'dbt build':>10} {'jetdbt run':>11}"
          f" {'ratio':>6} {'goal':>6}      {'dbt MB':>7} {'jetdbt dbt MB':>13} {'up MB':>6}"
          f" {'fork MB':>7}   {'dbt CPU':>8} {'stack CPU':>9}  {'deploy':>7}")  # fmt: skip
    for r in rows:
        goal = GOALS.get(r.models)
        ratio = r.jet.seconds / r.plain.seconds
        mark = "" if goal is None else ("ok" if ratio <= goal else "MISSED")
        print(f"{r.models:>6} {r.nodes:>6} {r.pairs:>5} {r.plain.seconds:>9.2f}s"
              f" {r.jet.seconds:>10.2f}s {ratio:>6.2f} {'<=' + str(goal or '-'):>6} {mark:>6}"
              f" {r.plain.peak_mb:>7.0f} {r.jet.dbt_peak_mb:>13.0f} {r.jet.up_peak_mb:>6.0f}"
              f" {r.jet.forkserver_peak_mb:>7.0f}   {r.plain.cpu:>7.1f}s {r.jet.stack_cpu:>8.1f}s"
              f"  {r.deploy_s:>6.1f}s")  # fmt: skip
    if graph is not None:
        firsts, cached, nodes = graph
        first = firsts[0]
        mark = "ok" if first <= GOAL_GRAPH_FIRST else "MISSED"
        print(f"\nGET /v1/projects/{{p}}/graph at {largest} models ({nodes} nodes in the page):"
              f" first answer {first * 1e3:.0f} ms (goal <= {GOAL_GRAPH_FIRST * 1e3:.0f} ms"
              f" {mark}); uncached, n={len(firsts)}: median"
              f" {statistics.median(firsts) * 1e3:.0f} ms, max {max(firsts) * 1e3:.0f} ms;"
              f" cached median {cached * 1e3:.1f} ms")  # fmt: skip


def main() -> None:
    asyncio.run(bench())


if __name__ == "__main__":
    main()

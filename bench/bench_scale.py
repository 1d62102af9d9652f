"""How jetdbt's cost grows with the project: `jetdbt run` against plain `dbt build` at
28, 500 and 5,000 generated models, side by side in one run, beside dbt's own node work,
with the API's lag, memory, CPU and the deploy beside each, where a small run's time goes,
and the first answer of the project's graph at the largest size.

- plain `dbt build`: a person's CLI in a project folder of its own, warm (built once
  before timing, or at sizes above JETDBT_SCALE_WARM_BUILD_UP_TO only parsed: a build
  there takes minutes, and the partial-parse file is what makes a folder warm);
- `jetdbt run NAME --json`: the CLI against `jetdbt up` started by this benchmark as its
  own process tree (nats-server, Postgres, the runner with its fork server and its
  sandbox as `jetdbt up` sets it, the projectors and the API) in a temporary home, each
  project deployed (and below the same size built once) before timing.

Timed builds alternate (plain first, then jetdbt, then the other way round), so a busy
machine weighs on both alike. Beside each build, dbt's node work: first node start to
last node finish, from the plain build's run_results.json and from the run's nodes on
the API (dbt's timing both), so jetdbt's wall time over its span is what jetdbt adds
around dbt (goal 1.05). The API's trail: after the CLI exits, how long GET
/v1/runs/{id} (polled every 10 ms) takes to show the run's final status, the worst of the
size's builds (goal 1 s). At the smallest size, where fixed costs show most, the run's
moments (its events' stored times on the bus, its nodes' span, the CLI's start and exit,
the API's final answer) say where the time goes.

Memory is peak RSS: plain dbt's own; for jetdbt the dbt child the runner forked for the
build, and the `jetdbt up` process (runner, projectors and API are one process there),
each reset before the build so a deploy's peak is not counted (a forked child shares its
parent's pages: RSS counts them in both); each of them at most plain dbt's + 300 MB at
5,000 models. CPU is user and system seconds: plain dbt's, and every process under
`jetdbt up` plus the CLI's over the build. The deploy (the CLI's `jetdbt deploy`, a full
parse of a project the stack has not seen) is beside a plain `dbt parse` in the plain
folder before its first build (a full parse too): at most 0.8 of it at 5,000. The
graph's first answer is GET /v1/projects/{p}/graph for a page the API has not seen (each
sample asks a `limit` it was not asked before, still the whole graph), beside the cached
answer.

    python bench/bench_scale.py

JETDBT_SCALE_SIZES (default 28,500,5000), JETDBT_SCALE_REPS (timed pairs per size,
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
import uuid
from pathlib import Path
from typing import NamedTuple

import aiohttp
import msgspec
import proc_tree
import run_phases
from bench_overhead import Plain
from gen_project import generate
from jetdbt.services.access.local import cli_token
from jetdbt.services.api.graph_routes import NODES_PER_PAGE
from jetdbt.services.stack.stack_file import read_stack_file
from jetdbt.shared.process.config import load

BIN = Path(sys.executable).parent
GOALS = {28: 0.3, 500: 0.75, 5000: 0.8}  # jetdbt run / plain dbt build, at most
GOAL_RUN_OVER_SPAN = 1.05  # jetdbt run / dbt's node work, at most, at every size
GOAL_TRAIL = 1.0  # seconds the API may show a run unfinished after its CLI exits
GOALS_DEPLOY = {5000: 0.8}  # jetdbt deploy / plain dbt parse, at most
GOALS_MEMORY_MB = {5000: 300}  # peak RSS over plain dbt's, at most
GOAL_GRAPH_FIRST = 0.100
SAMPLE_SECONDS = 0.2
FORKSERVER = "jetdbt.services.runner.process.forkserver"


def _ints(name: str, default: str) -> list[int]:
    return [int(x) for x in (os.environ.get(name) or default).split(",") if x.strip()]


class Cost(NamedTuple):
    seconds: float
    cpu: float  # user + system seconds
    peak_mb: float
    span: float = 0.0  # a build's node work: first node start to last node finish


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


def _plain_build(plain: Plain) -> Cost:
    cost = _run(plain.argv, plain.env, plain.project)
    return cost._replace(span=run_phases.plain_span(plain.project))


class JetdbtCost(NamedTuple):
    seconds: float
    stack_cpu: float  # every process under `jetdbt up`, and the CLI
    dbt_peak_mb: float  # the dbt child the runner forked for the build
    up_peak_mb: float  # the `jetdbt up` process: runner, projectors, API
    forkserver_peak_mb: float
    span: float  # dbt's node work, from the run's nodes on the API
    trail: float  # from the CLI's exit until the API shows the run's end
    nodes: int


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

    async def sandbox(self) -> str:
        """The runner's sandbox, as GET /healthz describes it."""
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{self.api_url}/healthz") as resp:
                        return (await resp.json())["sandbox"]
                await asyncio.sleep(0.1)
        return "unknown"

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

    async def build(self, name: str) -> tuple[JetdbtCost, dict[str, float]]:
        """The build's cost, and its moments (run_phases.moments)."""
        root = self.proc.pid
        fork = self._forkserver()
        for pid in (root, fork):
            if pid is not None:
                proc_tree.reset_peak(pid)
        before = proc_tree.cpu_seconds(proc_tree.descendants(root))
        peaks = {"dbt": 0.0, "up": 0.0, "fork": 0.0}

        async def sample() -> None:
            nonlocal fork
            while True:
                fork = fork or self._forkserver()
                if fork is not None:
                    peaks["fork"] = max(peaks["fork"], proc_tree.peak_rss_mb(fork))
                    for pid in proc_tree.descendants(fork)[1:]:
                        peaks["dbt"] = max(peaks["dbt"], proc_tree.peak_rss_mb(pid))
                peaks["up"] = max(peaks["up"], proc_tree.peak_rss_mb(root))
                await asyncio.sleep(SAMPLE_SECONDS)

        run_id = uuid.uuid4().hex
        sampler = asyncio.create_task(sample())
        began = time.time()
        try:
            cli = await asyncio.to_thread(self.cli, "run", name, "--json", "--run-id", run_id)
        finally:
            sampler.cancel()
        exited = began + cli.seconds
        after = proc_tree.cpu_seconds(proc_tree.descendants(root))
        async with aiohttp.ClientSession(headers=self.headers) as session:
            shown, run = await run_phases.final_run(session, f"{self.api_url}/v1/runs/{run_id}")
        first, last = run_phases.node_span(run["nodes"])
        moments = await run_phases.moments(load(self.env), run, (began, exited), shown)
        cost = JetdbtCost(
            cli.seconds, after - before + cli.cpu, peaks["dbt"], peaks["up"], peaks["fork"],
            last - first, shown - exited, len(run["nodes"]),
        )  # fmt: skip
        return cost, moments

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
    pairs: int
    plain: Cost
    jet: JetdbtCost
    trail_max: float
    parse_s: float
    deploy_s: float
    moments: list[dict[str, float]]


async def _size(work: Path, up: Up, models: int, pairs: int, warm_up_to: int) -> Row | None:
    """The size's row; None with no pair asked for (the project deployed, for its graph)."""
    source = generate(work / "source" / f"bench_{models}", models)
    name = f"bench_{models}"
    plain = Plain(work, source, "bench")
    deploy = up.cli("deploy", str(source), "--project", name)
    if pairs == 0:
        return None
    parse = _run([plain.argv[0], "parse", *plain.argv[2:]], plain.env, plain.project)
    if models <= warm_up_to:
        _run(plain.argv, plain.env, plain.project)
        await up.build(name)
    plain_costs, jet_builds = [], []
    for i in range(pairs):
        if i % 2 == 0:
            plain_costs.append(_plain_build(plain))
            jet_builds.append(await up.build(name))
        else:
            jet_builds.append(await up.build(name))
            plain_costs.append(_plain_build(plain))
    jet_costs = [cost for cost, _ in jet_builds]
    return Row(
        models, pairs, _median(plain_costs), _median(jet_costs), max(c.trail for c in jet_costs),
        parse.seconds, deploy.seconds, [moments for _, moments in jet_builds],
    )  # fmt: skip


def _median(costs: list):
    return type(costs[0])(*(statistics.median(c[i] for c in costs) for i in range(len(costs[0]))))


async def bench() -> None:
    sizes = _ints("JETDBT_SCALE_SIZES", "28,500,5000")
    reps = _ints("JETDBT_SCALE_REPS", "3,2,1")
    warm_up_to = _ints("JETDBT_SCALE_WARM_BUILD_UP_TO", "1000")[0]
    samples = _ints("JETDBT_SCALE_GRAPH_SAMPLES", "5")[0]
    rows, graph = [], None
    with tempfile.TemporaryDirectory(prefix="jetdbt-scale-") as tmp:
        work = Path(tmp)
        up = Up(work / "home")
        try:
            await up.start()
            print(f"sandbox: {await up.sandbox()}")
            for i, models in enumerate(sizes):
                pairs = reps[min(i, len(reps) - 1)]
                row = await _size(work, up, models, pairs, warm_up_to)
                rows += [row] if row else []
                _print(rows)
            graph = await up.graph_answers(f"bench_{sizes[-1]}", samples)
        finally:
            with contextlib.suppress(Exception):
                up.stop()
    _print(rows, graph, sizes[-1])
    if rows:
        smallest = min(rows, key=lambda r: r.models)
        run_phases.print_moments(smallest.moments, smallest.models)


def _judged(value: float, goal: float | None, spec: str) -> str:
    """`value` beside its goal, ok or MISSED; blank where the size has no goal."""
    if goal is None:
        return f"{value:{spec}} {'':>7} {'':>6}"
    mark = "ok" if value <= goal else "MISSED"
    return f"{value:{spec}} {'<=' + format(goal, 'g'):>7} {mark:>6}"


def _print(rows: list[Row], graph=None, largest: int | None = None) -> None:
    print(
        "\njetdbt run against plain dbt build, by project size (median of the timed pairs;"
        " span: dbt's node work; API trail: the worst build's, in seconds)\n"
    )
    print(f"{'models':>6} {'nodes':>6} {'pairs':>5} {'dbt build':>10} {'jetdbt run':>11}"
          f" {'ratio':>6} {'goal':>7} {'':>6}  {'dbt span':>9} {'jetdbt span':>11}"
          f" {'run/span':>8} {'goal':>7} {'':>6}  {'API trail':>9} {'goal':>7}")  # fmt: skip
    for r in rows:
        print(f"{r.models:>6} {r.jet.nodes:>6.0f} {r.pairs:>5} {r.plain.seconds:>9.2f}s"
              f" {r.jet.seconds:>10.2f}s"
              f" {_judged(r.jet.seconds / r.plain.seconds, GOALS.get(r.models), '>6.2f')}"
              f"  {r.plain.span:>8.2f}s {r.jet.span:>10.2f}s"
              f" {_judged(r.jet.seconds / r.jet.span, GOAL_RUN_OVER_SPAN, '>8.2f')}"
              f"  {_judged(r.trail_max, GOAL_TRAIL, '>9.3f')}")  # fmt: skip
    print(
        "\nmemory (peak RSS, MB; over: beside plain dbt's), CPU, and the deploy beside a plain"
        " dbt parse\n"
    )
    print(f"{'models':>6} {'dbt':>6} {'jetdbt dbt':>10} {'up':>6} {'fork':>6}"
          f"  {'dbt over':>8} {'goal':>7} {'':>6} {'up over':>7} {'goal':>7} {'':>6}"
          f"  {'dbt CPU':>8} {'stack CPU':>9}  {'dbt parse':>9} {'deploy':>7}"
          f" {'ratio':>6} {'goal':>7}")  # fmt: skip
    for r in rows:
        memory, deploy = GOALS_MEMORY_MB.get(r.models), GOALS_DEPLOY.get(r.models)
        print(f"{r.models:>6} {r.plain.peak_mb:>6.0f} {r.jet.dbt_peak_mb:>10.0f}"
              f" {r.jet.up_peak_mb:>6.0f} {r.jet.forkserver_peak_mb:>6.0f}"
              f"  {_judged(r.jet.dbt_peak_mb - r.plain.peak_mb, memory, '>8.0f')}"
              f" {_judged(r.jet.up_peak_mb - r.plain.peak_mb, memory, '>7.0f')}"
              f"  {r.plain.cpu:>7.1f}s {r.jet.stack_cpu:>8.1f}s  {r.parse_s:>8.2f}s"
              f" {r.deploy_s:>6.2f}s"
              f" {_judged(r.deploy_s / r.parse_s, deploy, '>6.2f')}")  # fmt: skip
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

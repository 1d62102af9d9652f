"""What the sandbox costs (services/runner/process/sandbox.py): per invocation, and on whole runs.

In one process, alternating (so a busy machine weighs on both alike):

- per invocation: the runner's warm fork server starts a trivial child (`/bin/true`
  exec'd where dbt would run) and the child exits; contained, that includes the
  invocation's cgroup made with RUN_MEMORY, RUN_CPUS and RUN_PIDS, its namespaces, its
  tmpfs root and uid drop, the cgroup removed after, and a job folder of its own made
  with its RUN_DISK filesystem and removed (a job of one invocation: a job's later
  invocations reuse its folder); uncontained, the same spawn with no sandbox
  (JETDBT_SANDBOX=off). p50 and p95 of each, and the difference;
- whole runs: plain `dbt build` (bench_overhead's warm folder), `jetdbt run` against a
  stack with JETDBT_SANDBOX=off and against one with the sandbox on, on the example
  project and on a generated project, every round in a rotated order. Goal: the run with
  the sandbox within 5% of the run without.

    python bench/bench_sandbox.py

JETDBT_BENCH_SPAWNS (default 50) invocations of each kind, JETDBT_BENCH_REPS (default 3)
rounds on the example, JETDBT_BENCH_REPS_LARGE (default 1) on the generated project of
JETDBT_BENCH_MODELS (default 500) models.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench_overhead import EXAMPLE, Jetdbt, Plain, alternate, env_int, pct, start_stack
from gen_project import generate
from jetdbt.services.runner.process import spawn
from jetdbt.services.runner.process.containment import Containment
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

GOAL = 1.05
TRIVIAL = shutil.which("true") or "/bin/true"


class Invocations:
    """Trivial children of the fork server, contained by a runner's Containment or not."""

    def __init__(self, home: Path):
        self.containment = Containment(load({"JETDBT_HOME": str(home)}))
        self.jobs = home / "runner" / "jobs"
        self.out = os.open(os.devnull, os.O_WRONLY)

    async def start(self) -> str:
        """Checks the sandbox as a runner does at start (SandboxMissing says what lacks)."""
        spawn.warm_up()
        await self.containment.check()
        return self.containment.describe()

    async def once(self, contained: bool) -> float:
        name = f"bench-{uuid.uuid4().hex}"
        root = self.jobs / name
        started = time.perf_counter()
        disk = await asyncio.to_thread(self.containment.disk.attach, root) if contained else None
        spec = await self.containment.spec(root, None, name=name) if contained else None
        child = await spawn.spawn([], "/", {}, self.out, exec_=[TRIVIAL], sandbox=spec)
        code = await child.wait()
        if contained:
            await self.containment.release(name, root)
            if disk is not None:
                disk.detach()
            await asyncio.to_thread(shutil.rmtree, root, True)
        elapsed = time.perf_counter() - started
        if code != 0:
            kind = "contained" if contained else "uncontained"
            raise RuntimeError(f"a trivial {kind} child exited {code}")
        return elapsed

    async def compare(self, n: int) -> tuple[list[float], list[float]]:
        await self.once(True)  # the first cgroup folders made, the server's children warm
        off, on = [], []
        for i in range(n):
            for contained in (i % 2 == 0, i % 2 != 0):
                (on if contained else off).append(await self.once(contained))
        return off, on

    def close(self) -> None:
        os.close(self.out)


async def bench() -> None:
    jlog.configure("warning")
    spawns = env_int("JETDBT_BENCH_SPAWNS", 50)
    reps, reps_large = env_int("JETDBT_BENCH_REPS", 3), env_int("JETDBT_BENCH_REPS_LARGE", 1)
    models = env_int("JETDBT_BENCH_MODELS", 500)
    rows = []
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        work = Path(tmp)
        invocations = Invocations(work / "invocations")
        try:
            described = await invocations.start()
            off_s, on_s = await invocations.compare(spawns)
        finally:
            invocations.close()
        large = generate(work / "source" / "bench", models)
        on = await start_stack(work / "home-on")
        off = await start_stack(work / "home-off", JETDBT_SANDBOX="off")
        try:
            cases = [
                (EXAMPLE.name, "jaffle_shop", EXAMPLE, "jaffle_shop", reps),
                (f"generated, {models} models", "bench", large, "bench", reps_large),
            ]
            for label, name, source, profile, n in cases:
                plain = Plain(work, source, profile)
                jet_off, jet_on = Jetdbt(off, name), Jetdbt(on, name)
                for jet in (jet_off, jet_on):
                    await jet.deploy(source)
                timed = await alternate([plain.build, jet_off.build, jet_on.build], n)
                rows.append((label, n, *(statistics.median(t) for t in timed)))
        finally:
            await on.stop()
            await off.stop()
    _print(described, off_s, on_s, rows)


def _print(described: str, off_s: list[float], on_s: list[float], rows: list) -> None:
    print(f"\nsandbox: {described}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\ncost per invocation: fork server -> {TRIVIAL} exited"
          f" (n={len(on_s)} each, alternating)\n")  # fmt: skip
    print(f"{'':<12} {'p50':>9} {'p95':>9}")
    for label, samples in (("sandbox off", off_s), ("sandbox on", on_s)):
        print(f"{label:<12} {pct(samples, 0.5) * 1e3:>7.1f}ms {pct(samples, 0.95) * 1e3:>7.1f}ms")
    diffs = [(pct(on_s, q) - pct(off_s, q)) * 1e3 for q in (0.5, 0.95)]
    print(f"{'difference':<12} {diffs[0]:>7.1f}ms {diffs[1]:>7.1f}ms")
    print("\nwhole runs (median of the rounds, each round's order rotated)\n")
    print(f"{'project':<28} {'rounds':>6} {'dbt build':>10} {'run, off':>9} {'run, on':>9}"
          f" {'on/off':>7} {'goal':>6}")  # fmt: skip
    for label, n, plain, off, on in rows:
        ratio = on / off
        mark = "ok" if ratio <= GOAL else "MISSED"
        print(f"{label:<28} {n:>6} {plain:>9.2f}s {off:>8.2f}s {on:>8.2f}s {ratio:>7.3f}"
              f" {'<=' + str(GOAL):>6}  {mark}")  # fmt: skip


def main() -> None:
    asyncio.run(bench())


if __name__ == "__main__":
    main()

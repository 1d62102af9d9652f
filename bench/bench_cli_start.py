"""How fast the command line starts: `jetdbt --help` and `jetdbt status` (target 0.3 s).

Starts a stack of its own (embedded nats-server and Postgres, or DATABASE_URL) so that
`status` does its real work (one API call and the lag table), then times each command
TRIALS times as a user runs it, by wall clock and CPU time, and reads `python -X
importtime` for what `status` imports and what the biggest imports cost. Not a test: it
prints, and exits 1 when a best CPU time is over the target (a busy machine stretches the
wall clock) or `status` imports a heavy module.

    .venv/bin/python bench/bench_cli_start.py [TRIALS]   (default 10)
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jetdbt.services.stack.composition import Stack  # noqa: E402
from jetdbt.services.stack.embedded import NatsServer, start_postgres  # noqa: E402
from jetdbt.shared.process import logging as jlog  # noqa: E402
from jetdbt.shared.process.config import load  # noqa: E402

TARGET = 0.3
JETDBT = str(Path(sys.executable).parent / "jetdbt")
# What `status` must not import (docs/guide.md's promise): the loop's, the bus's, the display's.
HEAVY = ("aiohttp", "rich", "dbt", "nats", "asyncio")


def wall(argv: list[str], env: dict, trials: int) -> list[tuple[float, float]]:
    """Wall clock and CPU seconds (user and system) of each run: on a busy machine the wall
    clock waits for a core, the CPU time does not."""
    times = []
    for _ in range(trials):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True)
        took = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        times.append((took, cpu))
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv[1:])} failed: {done.stderr.decode()[-400:]}")
    return times


def answer(url: str, token: str, trials: int) -> float:
    """The best time the API takes to answer `url`: the part of `status` that is not start."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    times = []
    for _ in range(trials):
        started = time.perf_counter()
        with opener.open(request) as resp:
            resp.read()
        times.append(time.perf_counter() - started)
    return min(times)


def imports(argv: list[str], env: dict) -> tuple[float, list[tuple[int, str]]]:
    """Seconds `python -X importtime` counts for every import, and the top-level ones."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if cumulative.strip().isdigit() and not name.startswith("  "):
            rows.append((int(cumulative), name.strip()))
    return sum(us for us, _ in rows) / 1e6, sorted(rows, reverse=True)


async def main(trials: int) -> int:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory() as tmp:
        nats = NatsServer(Path(tmp) / "nats").start()
        pg_server = None
        pg_url = os.environ.get("DATABASE_URL")
        if not pg_url:
            pg_server, pg_url = start_postgres(Path(tmp) / "pg")
        env_vars = {
            "JETDBT_HOME": str(Path(tmp) / "home"),
            "NATS_URL": nats.url,
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"b_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
        }
        stack = await Stack(load(env_vars), runner=False).start()
        try:
            env = {
                **os.environ,
                **env_vars,
                "JETDBT_API_PORT": stack.api_url.rsplit(":", 1)[1],
                "JETDBT_TOKEN": stack.admin_token or "",
            }
            floor = await asyncio.to_thread(wall, [sys.executable, "-c", "pass"], env, trials)
            print(
                f"python -c pass (the machine's floor): best {min(t for t, _ in floor):.3f} s,"
                f" CPU best {min(c for _, c in floor):.3f} s"
            )
            over = 0
            for argv in ([JETDBT, "--help"], [JETDBT, "status"]):
                times = await asyncio.to_thread(wall, argv, env, trials)
                walls = [took for took, _ in times]
                best, median = min(walls), statistics.median(walls)
                cpu = min(used for _, used in times)
                over += cpu > TARGET  # the wall clock of a busy machine is no verdict
                print(
                    f"jetdbt {argv[1]:<7} wall clock: best {best:.3f} s, median {median:.3f} s;"
                    f" CPU best {cpu:.3f} s (target {TARGET} s, {trials} trials)"
                )
            served = await asyncio.to_thread(
                answer, f"{stack.api_url}/v1/projections", env["JETDBT_TOKEN"], trials
            )
            print(f"  of which the API answers GET /v1/projections in {served:.3f} s (best)")
            total, top = await asyncio.to_thread(imports, [JETDBT, "status"], env)
            names = {name.split(".")[0] for _, name in top}
            print(f"jetdbt status imports: {total:.3f} s by -X importtime; the largest:")
            for us, name in top[:6]:
                print(f"  {us / 1e6:.3f} s  {name}")
            heavy = sorted(names & set(HEAVY))
            print(f"heavy modules `status` imported: {', '.join(heavy) or 'none'}")
            return 1 if over or heavy else 0
        finally:
            await stack.stop()
            nats.stop()
            if pg_server:
                pg_server.cleanup()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)))

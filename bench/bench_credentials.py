"""What a run's own Postgres login costs (services/runner/setup/run_credentials.py).

On a Postgres this benchmark starts (pgserver, in a temporary folder), which is also the
stack's own database, with two warehouses in databases of their own: `plain` (the
configured login) and `per_run` (credentials: per_run). In one process:

- per run: the login made (the environment's group roles checked, earlier attempts'
  roles looked for, the role created) and dropped (sessions ended, anything it owns
  reassigned, the role dropped), each on a connection of its own, as a runner does for
  every run. p50 and p95 of each and of both; goal: both under 100 ms at p50;
- whole runs: `jetdbt run` of the same generated project on each warehouse, alternating,
  median of the rounds.

    python bench/bench_credentials.py

JETDBT_BENCH_LOGINS (default 50) logins made and dropped, JETDBT_BENCH_REPS (default 3)
rounds of runs on a project of JETDBT_BENCH_MODELS (default 20) models.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import yaml
from bench_overhead import alternate, env_int, pct
from gen_project import generate
from jetdbt.services.cli import client
from jetdbt.services.runner.setup import run_credentials
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import load_warehouses
from jetdbt.services.stack.composition import Stack
from jetdbt.services.stack.embedded import start_postgres
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load
from jetdbt.shared.project.environments import Environment

GOAL_MS = 100.0
WAREHOUSES = ("plain", "per_run")


def _parts(url: str) -> dict:
    """host/port/user of pgserver's URL (a unix socket folder in `?host=`)."""
    from urllib.parse import parse_qs, urlparse

    parsed = urlparse(url)
    host = parse_qs(parsed.query).get("host", [parsed.hostname or "127.0.0.1"])[0]
    return {"host": host, "port": parsed.port or 5432, "user": parsed.username or "postgres"}


async def _databases(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for name in WAREHOUSES:
            await conn.execute(f'CREATE DATABASE "bench_{name}"')
    finally:
        await conn.close()


def _warehouses_file(work: Path, url: str) -> Path:
    base = {"type": "postgres", **_parts(url), "schema": "bench"}
    body = {
        "plain": {**base, "dbname": "bench_plain"},
        "per_run": {**base, "dbname": "bench_per_run", "credentials": "per_run"},
    }
    path = work / "warehouses.yaml"
    path.write_text(yaml.safe_dump({"warehouses": body}))
    return path


async def _logins(file: Path, n: int) -> tuple[list[float], list[float]]:
    """`n` logins made and dropped as a runner does, after one untimed (the roles made)."""
    wh = load_warehouses(file, Path("unused.duckdb"))["per_run"]
    place = Environment(warehouse="per_run", target="main", schema="bench", database=wh.dbname)
    resolver = Resolver()
    made, dropped = [], []
    for i in range(n + 1):
        started = time.perf_counter()
        login = await run_credentials.issue(
            wh, resolver, [place], scope="bench", holder=f"bench run {i}", writes=True,
            seconds=3600,
        )  # fmt: skip
        between = time.perf_counter()
        await run_credentials.drop(wh, resolver, login)
        if i:
            made.append(between - started)
            dropped.append(time.perf_counter() - between)
    return made, dropped


async def _build(stack: Stack, project: str) -> float:
    started = time.perf_counter()
    final = await client.run(stack.bus, project, RunCommand(command=BuildCommand()))
    elapsed = time.perf_counter() - started
    if not isinstance(final, ev.RunFinished) or final.result.status != "passed":
        raise RuntimeError(f"the build of {project} did not pass: {final}")
    return elapsed


async def bench() -> None:
    jlog.configure("warning")
    n, reps = env_int("JETDBT_BENCH_LOGINS", 50), env_int("JETDBT_BENCH_REPS", 3)
    models = env_int("JETDBT_BENCH_MODELS", 20)
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        work = Path(tmp)
        server, url = start_postgres(work / "pg" / "data")
        try:
            await _databases(url)
            file = _warehouses_file(work, url)
            made, dropped = await _logins(file, n)
            settings = {
                "JETDBT_HOME": str(work / "home"),
                "JETDBT_API_PORT": "0",
                "DATABASE_URL": url,
                "JETDBT_SCHEMA": f"bench_{uuid.uuid4().hex[:8]}",
                "JETDBT_WAREHOUSES": str(file),
            }
            stack = await Stack(load(settings)).start()
            try:
                for name in WAREHOUSES:
                    source = generate(work / "source" / name, models)
                    (source / "jetdbt.yaml").write_text(f"profile:\n  warehouse: {name}\n")
                    _, deployed = await client.deploy(stack.bus, source, name)
                    if not isinstance(deployed, ev.Deployed):
                        raise RuntimeError(f"the deploy of {name} did not succeed: {deployed}")
                runs = await alternate([lambda w=w: _build(stack, w) for w in WAREHOUSES], reps)
            finally:
                await stack.stop()
        finally:
            server.cleanup()
    _print(made, dropped, runs, models)


def _print(made: list[float], dropped: list[float], runs: list[list[float]], models: int) -> None:
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\na run's own login (n={len(made)}, each on a connection of its own)\n")
    print(f"{'':<16} {'p50':>9} {'p95':>9}")
    both = [a + b for a, b in zip(made, dropped, strict=True)]
    for label, samples in (("made", made), ("dropped", dropped), ("made + dropped", both)):
        print(f"{label:<16} {pct(samples, 0.5) * 1e3:>7.1f}ms {pct(samples, 0.95) * 1e3:>7.1f}ms")
    mark = "ok" if pct(both, 0.5) * 1e3 < GOAL_MS else "MISSED"
    print(f"goal: made + dropped under {GOAL_MS:.0f} ms at p50  {mark}")
    plain, per_run = (statistics.median(r) for r in runs)
    print(f"\nwhole runs, {models} models (median of {len(runs[0])} rounds, alternating)\n")
    print(f"{'configured login':<20} {plain:>7.2f}s")
    print(f"{'per_run login':<20} {per_run:>7.2f}s  ({(per_run - plain) * 1e3:+.0f} ms)")


def main() -> None:
    asyncio.run(bench())


if __name__ == "__main__":
    main()

"""What an engine environment costs (services/runner/provision/environments.py): its first use, and
whether a project built in one keeps the warm dbt's speed over plain dbt.

- first use: dbt-sqlite (and each adapter JETDBT_BENCH_ADAPTERS lists, as
  `snowflake,bigquery`) provisioned into an empty environments folder, once with an empty
  uv cache of its own (every wheel downloaded from the operator's index) and once with
  uv's usual cache; then the same environment asked for again (cached: nothing installed);
- whole runs: a generated project built by plain `dbt build` and by `jetdbt run`, on
  SQLite in the provisioned environment (its own dbt, its own warm fork server) and on
  DuckDB in jetdbt's own environment, each pair alternated. Goal: the provisioned
  environment's jetdbt/plain ratio within 10% of the default environment's.

    python bench/bench_engines.py

    JETDBT_BENCH_ADAPTERS=snowflake,bigquery python bench/bench_engines.py

JETDBT_BENCH_MODELS (default 100) models, JETDBT_BENCH_REPS (default 3) rounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import msgspec
import yaml
from bench_overhead import THREADS, Jetdbt, Plain, alternate, env_int, start_stack
from gen_project import generate
from jetdbt.services.runner.provision import environments
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

GOAL = 1.10
ADAPTER = "sqlite"


async def _first_use(
    work: Path, adapter: str
) -> list[tuple[str, float, environments.EngineEnvironment]]:
    """Seconds to provision `adapter` cold, with uv's cache empty and with it as it is, and
    to find it once cached."""
    timings = []
    for label, uv_cache in (
        ("empty uv cache", work / f"uv-cache-{adapter}"),
        ("uv's own cache", None),
    ):
        saved = os.environ.get("UV_CACHE_DIR")
        if uv_cache is not None:
            os.environ["UV_CACHE_DIR"] = str(uv_cache)
        try:
            settings = load({"JETDBT_HOME": str(work / f"first-{adapter}-{len(timings)}")})
            started = time.perf_counter()
            environment = await environments.ensure(settings, adapter)
            timings.append((f"first use, {label}", time.perf_counter() - started, environment))
            started = time.perf_counter()
            await environments.ensure(settings, adapter)
            timings.append((f"again, {label}", time.perf_counter() - started, environment))
        finally:
            if uv_cache is not None:
                os.environ.pop("UV_CACHE_DIR")
            if saved is not None:
                os.environ["UV_CACHE_DIR"] = saved
    return timings


class PlainIn(Plain):
    """Plain `dbt build` with the provisioned environment's own dbt, on SQLite."""

    def __init__(self, work: Path, source: Path, environment, data: Path):
        super().__init__(work / "plain-sqlite", source, "bench")
        profiles = {"bench": {"target": "dev", "outputs": {"dev": _sqlite(data / "plain")}}}
        (Path(self.argv[-1]) / "profiles.yml").write_text(yaml.safe_dump(profiles))
        self.argv[0] = str(Path(environment.root) / "bin" / "dbt")


def _sqlite(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "type": "sqlite",
        "threads": THREADS,
        "database": "main",
        "schema": "main",
        "schemas_and_paths": {"main": str(folder / "main.db")},
        "schema_directory": str(folder),
    }


async def bench() -> None:
    jlog.configure("warning")
    models, reps = env_int("JETDBT_BENCH_MODELS", 100), env_int("JETDBT_BENCH_REPS", 3)
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        work = Path(tmp)
        others = [a for a in os.environ.get("JETDBT_BENCH_ADAPTERS", "").split(",") if a]
        first = {a: await _first_use(work, a) for a in (ADAPTER, *others)}
        environment = first[ADAPTER][-1][2]
        source = generate(work / "source" / "bench", models)
        data = work / "sqlite"
        warehouses = work / "warehouses.yaml"
        output = _sqlite(data / "jetdbt")
        warehouses.write_text(
            msgspec.json.encode({"main": {"type": "dbt_profile", "output": output}}).decode()
        )
        provisioned = await start_stack(
            work / "home-sqlite",
            JETDBT_WAREHOUSES=str(warehouses),
            JETDBT_ENVIRONMENTS_DIR=str(Path(environment.root).parent),
        )
        default = await start_stack(work / "home-duckdb")
        try:
            rows = []
            for label, stack, plain in (
                (f"{ADAPTER}, provisioned", provisioned, PlainIn(work, source, environment, data)),
                ("duckdb, jetdbt's own", default, Plain(work / "plain-duckdb", source, "bench")),
            ):
                jet = Jetdbt(stack, "bench")
                await jet.deploy(source)
                plain_s, jet_s = await alternate([plain.build, jet.build], reps)
                rows.append((label, statistics.median(plain_s), statistics.median(jet_s)))
        finally:
            await provisioned.stop()
            await default.stop()
    _print(first, models, reps, rows)


def _print(first, models: int, reps: int, rows) -> None:
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for adapter, timings in first.items():
        env = timings[-1][2]
        print(f"\ndbt-{adapter} {env.version('dbt-' + adapter)} with dbt-core"
              f" {env.version('dbt-core')}, {len(env.lock)} packages\n")  # fmt: skip
        for label, seconds, _ in timings:
            print(f"{label:<28} {seconds:>8.2f}s")
    print(f"\nwhole runs: {models} models, median of {reps} alternated rounds\n")
    print(f"{'environment':<24} {'dbt build':>10} {'jetdbt run':>11} {'ratio':>7}")
    ratios = []
    for label, plain, jet in rows:
        ratios.append(jet / plain)
        print(f"{label:<24} {plain:>9.2f}s {jet:>10.2f}s {jet / plain:>7.3f}")
    relative = ratios[0] / ratios[1]
    mark = "ok" if relative <= GOAL else "MISSED"
    print(f"\nprovisioned ratio / default ratio: {relative:.3f} (goal <= {GOAL}) {mark}")


if __name__ == "__main__":
    asyncio.run(bench())

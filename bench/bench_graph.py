"""Graph benchmark: deploy ingest of a 5,000-model project next to `dbt parse` alone,
and the graph query latency for that project, each beside its goal.

Starts the embedded stack (its own nats-server and Postgres) in a temporary home,
so it needs nothing running. `dbt parse` alone is what a person runs in a terminal
(it imports dbt first); a deploy parses in the runner's warm dbt, then stores the
manifest and ingests the graph. Deploys and parses alternate, PAIRS of them (each deploy
a new version: a file no model reads changes, so nothing is reused), and the median
ratio is taken: a deploy writes 5,000 files twice, and how long that takes here wanders
with the disk. Goals: the deploy at most 0.8 of that `dbt parse`; GET of the project's
graph under 100 ms at p95 (after the first answer, which reads and compresses the page
once).

    python bench/bench_graph.py [--models N] [--queries Q] [--pairs PAIRS]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import aiohttp
import msgspec
from gen_project import generate
from jetdbt.services.cli import client
from jetdbt.services.runner import graph
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load


def parse_alone(project: Path, work: Path) -> float:
    """`dbt parse` from scratch (no partial parse), against a throwaway DuckDB profile."""
    profiles = work / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "profiles.yml").write_text(
        f"bench:\n  target: main\n  outputs:\n    main:\n      type: duckdb\n"
        f"      path: {work / 'parse.duckdb'}\n"
    )
    argv = [sys.executable, "-m", "dbt.cli.main", "parse", "--no-partial-parse",
            "--project-dir", str(project), "--profiles-dir", str(profiles), "--quiet"]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(argv, check=True, cwd=project, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


GOAL_DEPLOY_RATIO = 0.8  # deploy of 5,000 models / a plain `dbt parse`
GOAL_GRAPH_P95 = 0.100  # GET /v1/projects/{p}/graph of 5,000 models


async def _latency(session, url: str, n: int, **headers) -> tuple[float, float, int]:
    """p50 and p95 of `n` GETs (the body read and, when compressed, decompressed)."""
    samples, size = [], 0
    expected = 304 if "If-None-Match" in headers else 200
    for _ in range(n):
        started = time.perf_counter()
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            assert resp.status == expected, body[:200]
        samples.append(time.perf_counter() - started)
        size = len(body)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))], size


async def _pairs(stack, project: Path, work: Path, pairs: int) -> tuple[list, list, ev.Deployed]:
    """`pairs` plain parses and deploys, alternating; the last deploy's event."""
    parses, deploys = [], []
    for i in range(pairs):
        (project / "README.md").write_text(f"version {i}\n")  # a new version, parsed whole
        if i % 2 == 0:
            parses.append(parse_alone(project, work / f"parse{i}"))
        started = time.perf_counter()
        _, deployed = await client.deploy(stack.bus, project, "bench")
        deploys.append(time.perf_counter() - started)
        assert isinstance(deployed, ev.Deployed), deployed
        if i % 2 == 1:
            parses.append(parse_alone(project, work / f"parse{i}"))
    return parses, deploys, deployed


async def bench(models: int, queries: int, pairs: int) -> None:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory(prefix="jetdbt-bench-") as tmp:
        work = Path(tmp)
        project = generate(work / "project", models)
        settings = load({"JETDBT_HOME": str(work / "home"), "JETDBT_API_PORT": "0"})
        stack = await Stack(settings).start()
        try:
            parses, deploys, deployed = await _pairs(stack, project, work, pairs)
            parse_s, deploy_s = statistics.median(parses), statistics.median(deploys)
            deployed_at = time.perf_counter()
            url = f"{stack.api_url}/v1/projects/bench/graph"
            token = stack.admin_token
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with aiohttp.ClientSession(headers=headers) as session:
                while True:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            break
                    await asyncio.sleep(0.05)
                folded_s = time.perf_counter() - deployed_at
                # The deploy's graph step again, alone: decode the manifest, build the graph,
                # store the blob, publish (the stream drops the duplicate event).
                raw = await stack.bus.get_blob(deployed.manifest_digest)
                ctx = RunnerContext(bus=stack.bus, settings=settings)
                t = time.perf_counter()
                manifest = msgspec.json.decode(raw)
                event = await graph.publish_graph(ctx, "bench", deployed.version, manifest, "main")
                ingest_s = time.perf_counter() - t
                t = time.perf_counter()
                async with session.get(url) as resp:  # the first answer encodes the page
                    etag = resp.headers.get("ETag", "")
                    await resp.read()
                first_s = time.perf_counter() - t
                p50, p95, size = await _latency(session, url, queries)
                c50, c95, _ = await _latency(session, url, queries, **{"If-None-Match": etag})
                async with session.get(url) as resp:
                    page = await resp.json()
                key = next(n["relation"] for n in page["nodes"] if n["name"] == "m_00042")
                relation = f"{stack.api_url}/v1/relations/{quote(key, safe='')}"
                r50, r95, _ = await _latency(session, relation, queries)
        finally:
            await stack.stop()
    rows = [
        ("models / graph nodes / edges", f"{models} / {event.node_count} / {event.edge_count}"),
        (f"dbt parse alone (median of {pairs})", f"{parse_s:.2f} s"
         f" ({', '.join(f'{x:.2f}' for x in parses)})"),
        (f"deploy, end to end (bundle, deps, parse, graph; median of {pairs})",
         f"{deploy_s:.2f} s ({', '.join(f'{x:.2f}' for x in deploys)})"),
        ("  graph ingest in it (manifest to GraphIngested)", f"{ingest_s:.2f} s,"
         f" manifest {len(raw) / 1e6:.1f} MB, graph {event.graph_size / 1e6:.1f} MB"),
        ("graph folded into Postgres after Deployed", f"{folded_s:.2f} s"),
        ("GET project graph, first (reads and compresses it)", f"{first_s * 1e3:.0f} ms"),
        (f"GET project graph (n={queries})", f"p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms,"
         f" body {size / 1e6:.1f} MB"),
        (f"GET project graph, If-None-Match (n={queries})",
         f"p50 {c50 * 1e3:.1f} ms, p95 {c95 * 1e3:.1f} ms (304)"),
        (f"GET one relation (n={queries})", f"p50 {r50 * 1e3:.1f} ms, p95 {r95 * 1e3:.1f} ms"),
    ]  # fmt: skip
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    ratio = deploy_s / parse_s
    print("\ngoals")
    for name, value, goal, unit in (
        ("deploy / plain dbt parse", ratio, GOAL_DEPLOY_RATIO, ""),
        ("GET project graph p95", p95 * 1e3, GOAL_GRAPH_P95 * 1e3, " ms"),
    ):
        mark = "ok" if value <= goal else "MISSED"
        print(f"  {name:<26} {value:8.2f}{unit}   goal <= {goal:g}{unit}  {mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(bench(args.models, args.queries, args.pairs))


if __name__ == "__main__":
    main()

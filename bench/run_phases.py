"""Where one `jetdbt run`'s time goes, read back once its CLI exits.

The node-work span is dbt's own (first node start to last node finish, from each node's
timing as jetdbt recorded it, or from a plain build's run_results.json), so a run's wall
time over it is what jetdbt adds around dbt's work. The API's trail is how long after the
CLI printed the run's end a reader of the API still sees it unfinished. The moments of a
run are the times its events were stored on the bus, its nodes' span, the CLI's start and
exit and the API's first final answer: what a small run spends outside dbt.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import msgspec
from jetdbt.services.cli.common import open_bus
from jetdbt.shared.bus import streams, subjects
from jetdbt.shared.process.config import Settings
from jetdbt.shared.runs import run_status
from nats.js.errors import NotFoundError

__all__ = ["final_run", "node_span", "plain_span", "moments", "print_moments"]

FINAL = (*run_status.RESULTS, run_status.REFUSED)
POLL_SECONDS = 0.010
GIVE_UP_SECONDS = 120.0
STORED = {
    "requested": "RunRequested stored",
    "started": "RunStarted stored",
    "finished": "RunFinished stored",
}


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


async def final_run(session: aiohttp.ClientSession, url: str) -> tuple[float, dict]:
    """When (epoch seconds) GET `url`, polled every 10 ms from now, first shows the run's
    final status, and the run as then shown."""
    give_up = time.monotonic() + GIVE_UP_SECONDS
    while time.monotonic() < give_up:
        async with session.get(url) as resp:
            body = await resp.read()
        run = msgspec.json.decode(body) if resp.status == 200 else {}
        if run.get("status") in FINAL:
            return time.time(), run
        await asyncio.sleep(POLL_SECONDS)
    raise RuntimeError(f"{url} showed no final status within {GIVE_UP_SECONDS:.0f} s")


def node_span(nodes: list[dict]) -> tuple[float, float]:
    """The first node's start and the last node's finish, in epoch seconds."""
    starts = [_epoch(n["started_at"]) for n in nodes if n.get("started_at")]
    ends = [_epoch(n["finished_at"]) for n in nodes if n.get("finished_at")]
    return min(starts), max(ends)


def plain_span(project: Path) -> float:
    """Seconds from the first node's start to the last node's finish of the build last
    run in `project`, from its target/run_results.json."""
    results = msgspec.json.decode((project / "target" / "run_results.json").read_bytes())
    steps = [t for r in results["results"] for t in r.get("timing") or []]
    return max(_epoch(t["completed_at"]) for t in steps) - min(
        _epoch(t["started_at"]) for t in steps
    )


async def _stored(settings: Settings, project: str, run_id: str) -> dict[str, float]:
    """When each of the run's requested, started and finished events was stored."""
    bus = await open_bus(settings)
    found = {}
    try:
        for kind, name in STORED.items():
            subject = subjects.run_event(project, run_id, kind)
            with contextlib.suppress(NotFoundError):
                found[name] = (await bus.js.get_last_msg(streams.EVENTS, subject)).time.timestamp()
    finally:
        await bus.close()
    return found


async def moments(
    settings: Settings, run: dict, cli: tuple[float, float], api_final: float
) -> dict[str, float]:
    """The run's moments, in seconds since its CLI started: `cli` is the CLI's start and
    exit, `api_final` when the API first showed the run's end (all epoch seconds)."""
    first, last = node_span(run["nodes"])
    at = {
        "CLI start": cli[0],
        **await _stored(settings, run["project"], run["run_id"]),
        "first node started": first,
        "last node finished": last,
        "CLI exit": cli[1],
        "API shows the final state": api_final,
    }
    return {name: t - cli[0] for name, t in at.items()}


def print_moments(runs: list[dict[str, float]], models: int) -> None:
    """Each moment's median over `runs`, in the order they happen, and the phase before it."""
    names = {name for run in runs for name in run}
    median = {n: statistics.median(r[n] for r in runs if n in r) for n in names}
    print(f"\nwhere a {models}-model run's time goes (median over {len(runs)} timed build(s))\n")
    print(f"{'moment':<26} {'ms from CLI start':>17} {'phase ms':>9}")
    previous = 0.0
    for name, at in sorted(median.items(), key=lambda item: item[1]):
        print(f"{name:<26} {at * 1e3:>17.0f} {(at - previous) * 1e3:>9.0f}")
        previous = at

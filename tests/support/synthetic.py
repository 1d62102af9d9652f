"""A synthetic event log for volume: runs with nodes, a failure, a lost attempt, a refusal.

Times are fixed and every node carries its finish time, so a replay folds exactly
what the live projection folded. The benches import this too (from the repo root).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus

__all__ = ["T0", "run_events", "log", "publish", "failed_result"]

T0 = datetime(2025, 6, 2, 9, 30, tzinfo=UTC)
NODES = 20


def failed_result(node: ev.NodeResult, **fields) -> ev.RunResult:
    """A failed run's result of the one node `node`; `fields`: more of the result's own."""
    return ev.RunResult(
        status="failed",
        engine="dbt-core-1x",
        engine_version="1",
        mode="build",
        totals={"failed": 1},
        nodes=[node],
        exit_code=1,
        **fields,
    )


def _at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def run_events(project: str, run_id: str, k: int, nodes: int = NODES) -> Iterator[ev.Event]:
    """One run's events; every 7th run loses its first attempt, every 5th fails a node,
    every 11th is refused."""
    yield ev.RunRequested(
        project=project,
        run_id=run_id,
        at=_at(k),
        command={"label": "build", "select": [], "vars": {"k": k}},
        requested_by="bench",
        command_seq=k + 1,
    )
    if k % 11 == 10:
        yield ev.RunRefused(project=project, run_id=run_id, at=_at(k), reason="synthetic refusal")
        return
    attempts = (1, 2) if k % 7 == 6 else (1,)
    results = []
    for attempt in attempts:
        if attempt > 1:
            yield ev.RunAttemptLost(project=project, run_id=run_id, attempt=1, at=_at(k))
        yield ev.RunStarted(
            project=project, run_id=run_id, attempt=attempt, version="v1", at=_at(k)
        )
        results = []
        for i in range(nodes if attempt == attempts[-1] else nodes // 2):
            uid = f"model.{project}.m{i}"
            yield ev.NodeStarted(
                project=project,
                run_id=run_id,
                attempt=attempt,
                unique_id=uid,
                resource_type="model",
                name=f"m{i}",
                started_at=_at(k + i),
                at=_at(k + i),
            )
            failed = k % 5 == 4 and i == nodes - 1
            node = ev.NodeResult(
                unique_id=uid,
                status="error" if failed else "success",
                outcome="failed" if failed else "passed",
                resource_type="model",
                name=f"m{i}",
                rows_affected=i,
                execution_time=0.25,
                started_at=_at(k + i),
                finished_at=_at(k + i + 1),
            )
            results.append(node)
            yield ev.NodeFinished(
                project=project, run_id=run_id, attempt=attempt, node=node, at=_at(k + i + 1)
            )
    failed = sum(n.outcome == "failed" for n in results)
    result = ev.RunResult(
        status="failed" if failed else "passed",
        engine="dbt-core-1x",
        engine_version="1.10.4",
        mode="build",
        totals={"passed": len(results) - failed, "failed": failed},
        nodes=results,
        exit_code=1 if failed else 0,
    )
    yield ev.RunFinished(
        project=project, run_id=run_id, attempt=attempts[-1], result=result, at=_at(k + nodes)
    )


def log(runs: int, project: str = "synth", start: int = 0) -> Iterator[ev.Event]:
    """`runs` runs, each with a deploy now and then."""
    for k in range(start, start + runs):
        if k % 50 == 0:
            yield ev.DeployRequested(
                project=project,
                deploy_id=f"d{k}",
                bundle_digest=f"sha256:{k:064x}",
                bundle_size=k,
                at=_at(k),
            )
        yield from run_events(project, f"r{k}", k)


async def publish(bus: Bus, stream: Iterator[ev.Event], window: int = 256) -> int:
    """Publish with up to `window` acks outstanding; returns how many were published."""
    count = 0
    pending: list = []
    for event in stream:
        pending.append(bus.publish(event))
        count += 1
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    return count

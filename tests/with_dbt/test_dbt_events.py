"""dbt's node events reach the runner while dbt still runs: from the warm dbt over a pipe
(no file log written), and from an engine binary by following its JSON file log.

The gate model holds the build until the test sees the orders model finish, so an
event that arrived only at the end would leave the build waiting (and the test
failing on its time limit) instead of passing by luck.
"""

from __future__ import annotations

import asyncio
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from jetdbt.services.runner.after import results
from jetdbt.services.runner.process.dbt_env import dbt_env
from jetdbt.services.runner.process.dbt_process import DbtInvocation

from tests.support.gate import GATE, add_gate

pytestmark = pytest.mark.dbt

ORDERS = "model.jaffle_shop.orders"


def _invocation(project: Path, tmp_path: Path, executable: list[str] | None) -> DbtInvocation:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "profiles.yml").write_text(
        "jaffle_shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: {tmp_path / 'wh.duckdb'}\n      threads: 4\n"
    )
    return DbtInvocation("build", [], project, profiles, dbt_env(), executable=executable)


async def _build_released_by_events(inv: DbtInvocation, release: Path):
    """Build; the gate is released by the orders model's NodeFinished as it arrives."""
    started, finished, lines, stamps = [], [], [], []

    async def on_event(record: dict) -> None:
        received = datetime.now(UTC)
        if (start := results.node_start(record)) is not None:
            started.append(start.unique_id)
        if (node := results.node_finished(record)) is not None:
            stamps.append((node.finished_at, results.logged_at(record), received))
            finished.append(node)
            if node.unique_id == ORDERS:
                release.touch()

    async def on_line(line: str) -> None:
        lines.append(line)

    code = await asyncio.wait_for(inv.run(on_line, on_event), 150)
    # Each NodeFinished carries dbt's own time: after the node's timing, before it got here.
    assert stamps and all(timed <= logged < got for timed, logged, got in stamps)
    return code, started, finished, lines


async def test_the_warm_dbt_hands_node_events_over_a_pipe_as_they_happen(project_copy, tmp_path):
    release = tmp_path / "release"
    add_gate(project_copy, release)
    inv = _invocation(project_copy, tmp_path, None)
    code, started, finished, lines = await _build_released_by_events(inv, release)
    assert code == 0, inv.error_tail()
    by_id = {n.unique_id: n for n in finished}
    assert by_id[GATE].outcome == "passed" and by_id[ORDERS].outcome == "passed"
    assert set(started) == set(by_id) and len(by_id) == len(finished)
    run_results = inv.artifact("run_results.json")
    assert {r["unique_id"] for r in run_results["results"]} == set(by_id)
    # The same nodes, outcomes and timing the artifacts give (the authoritative result).
    for node in results.from_artifacts(run_results, inv.artifact("manifest.json")):
        live = by_id[node.unique_id]
        assert (live.status, live.outcome, live.started_at) == (
            node.status,
            node.outcome,
            node.started_at,
        )
    assert any("Finished running" in line for line in lines)  # the human-readable log
    assert not inv.log_file.exists()  # no debug-level file log written, none polled


async def test_an_engine_binary_is_followed_through_its_json_file_log(project_copy, tmp_path):
    """An engine that is a binary cannot call back: its debug JSON file log is followed."""
    shim = tmp_path / "engine"
    shim.write_text(f"#!/bin/sh\nexec '{sys.executable}' -m dbt.cli.main \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    release = tmp_path / "release"
    add_gate(project_copy, release)
    inv = _invocation(project_copy, tmp_path, [str(shim)])
    code, started, finished, _ = await _build_released_by_events(inv, release)
    assert code == 0, inv.error_tail()
    assert {n.unique_id for n in finished} >= {GATE, ORDERS} and GATE in started
    assert inv.log_file.exists()


async def test_a_usage_error_is_said_and_exits_2(project_copy, tmp_path):
    inv = _invocation(project_copy, tmp_path, None)
    inv.argv.append("--no-such-flag")
    assert await inv.run() == 2
    assert "--no-such-flag" in inv.error_tail()


async def test_the_warm_dbt_rehearses_a_parse_and_a_build_and_forks_from_one_thread():
    """The fork server's rehearsal must succeed (else every child pays dbt's first-use costs
    again) and leave nothing running: one thread, no open DuckDB database."""
    script = (
        "import threading\n"
        "from jetdbt.services.runner.process import forkserver\n"
        "forkserver._preload()\n"
        "from dbt.adapters.duckdb.connections import DuckDBConnectionManager as M\n"
        "print(forkserver._rehearse(), threading.active_count(), M._ENV)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"dbt_warm_up_failed" not in err, err.decode()[-2000:]
    assert out.decode().split() == ["None", "1", "None"]

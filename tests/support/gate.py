"""A build held open on purpose: a model that waits for a file, so "while dbt is still
building" is a fact a test controls, not a race."""

from __future__ import annotations

from pathlib import Path

from tests.support.helpers import get_json, wait_for

__all__ = ["GATE", "GATE_MODEL", "add_gate", "gate_running", "until_gate_runs"]

GATE = "model.jaffle_shop.gate"
# A dbt-duckdb Python model that holds the build until its release file exists.
GATE_MODEL = """
import os
import time


def model(dbt, session):
    dbt.config(materialized="table")
    release = dbt.config.get("release_file")
    deadline = time.time() + 120
    while not os.path.exists(release) and time.time() < deadline:
        time.sleep(0.1)
    return dbt.ref("orders")
"""


def add_gate(project: Path, release: Path) -> None:
    """Add the gate model to a copy of the example project; `release` lets it finish."""
    (project / "models" / "marts" / "gate.py").write_text(GATE_MODEL)
    (project / "models" / "marts" / "gate.yml").write_text(
        f"models:\n  - name: gate\n    config:\n      release_file: '{release}'\n"
    )


async def gate_running(api_url: str, run_id: str) -> bool:
    """Whether the API shows the run's gate model running."""
    status, body = await get_json(f"{api_url}/v1/runs/{run_id}")
    nodes = {n["unique_id"]: n for n in body.get("nodes", [])} if status == 200 else {}
    return nodes.get(GATE, {}).get("status") == "running"


async def until_gate_runs(api_url: str, run_id: str, timeout: float = 120) -> None:
    await wait_for(lambda: gate_running(api_url, run_id), timeout=timeout)

"""Progress is live: an early node is projected and readable while a later model still runs."""

from __future__ import annotations

import asyncio

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.gate import GATE_MODEL, add_gate, gate_running, until_gate_runs  # noqa: F401
from tests.support.helpers import deploy_and_wait, get_json, wait_for

pytestmark = pytest.mark.dbt


async def test_node_finished_is_readable_while_a_later_model_runs(stack, project_copy, tmp_path):
    release = tmp_path / "release"
    add_gate(project_copy, release)
    await deploy_and_wait(stack.bus, project_copy, "live")
    run_task = asyncio.create_task(
        client.run(stack.bus, "live", RunCommand(command=BuildCommand(), run_id="live1"))
    )
    url = f"{stack.api_url}/v1/runs/live1"

    async def early_done_while_gate_runs():
        status, body = await get_json(url)
        if status != 200:
            return None
        nodes = {n["unique_id"]: n for n in body["nodes"]}
        seed = nodes.get("seed.jaffle_shop.raw_orders", {})
        gate = nodes.get("model.jaffle_shop.gate", {})
        if seed.get("outcome") == "passed" and gate.get("status") == "running":
            return body
        return None

    body = await wait_for(early_done_while_gate_runs, timeout=90)
    assert body["status"] == "running"
    assert not run_task.done()
    assert body["finished_at"] is None and body["nodes_finished"] >= 1
    release.touch()
    final = await asyncio.wait_for(run_task, 120)
    assert final.result.status == "passed"
    assert any(
        n.unique_id == "model.jaffle_shop.gate" and n.outcome == "passed"
        for n in final.result.nodes
    )


async def test_cancel_kills_the_running_build(stack, project_copy, tmp_path):
    """A cancel reaches the runner holding the run; dbt is killed and the run says so."""
    import msgspec

    release = tmp_path / "never-released"
    add_gate(project_copy, release)
    await client.deploy(stack.bus, project_copy, "live")
    run_task = asyncio.create_task(
        client.run(stack.bus, "live", RunCommand(command=BuildCommand(), run_id="cancel1"))
    )

    await until_gate_runs(stack.api_url, "cancel1")
    # A cancel is scoped to its project: another project's cancel of this run id is nothing.
    await stack.bus.js.publish("dbt.cmd.cancel.other", msgspec.json.encode({"run_id": "cancel1"}))
    await asyncio.sleep(1)
    assert await gate_running(stack.api_url, "cancel1") and not run_task.done()
    await stack.bus.js.publish("dbt.cmd.cancel.live", msgspec.json.encode({"run_id": "cancel1"}))
    final = await asyncio.wait_for(run_task, 60)
    assert final.result.status == "cancelled" and final.result.error == "cancelled"
    assert not release.exists()

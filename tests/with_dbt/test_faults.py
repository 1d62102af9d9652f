"""Faults tell the truth: a NATS outage in the middle of a good build does not turn it
into a failure, a timeout, or nodes left running."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.gate import GATE, add_gate, until_gate_runs
from tests.support.helpers import deploy_and_wait, get_json, wait_for
from tests.support.processes import working_in

pytestmark = pytest.mark.dbt


async def test_a_nats_restart_mid_run_loses_nothing(stack, nats_server, project_copy, tmp_path):
    release = tmp_path / "release"
    add_gate(project_copy, release)
    await deploy_and_wait(stack.bus, project_copy, "outage")
    run = asyncio.create_task(
        client.run(stack.bus, "outage", RunCommand(command=BuildCommand(), run_id="o1"))
    )
    url = f"{stack.api_url}/v1/runs/o1"
    await until_gate_runs(stack.api_url, "o1")
    nats_server.stop()
    release.touch()  # dbt finishes the build while NATS is away
    await asyncio.sleep(8)  # longer than a publish's own timeout
    nats_server.start()

    final = await asyncio.wait_for(run, 180)
    assert isinstance(final, ev.RunFinished), final
    result = final.result
    assert result.status == "passed", result.error
    assert result.error is None
    assert len(result.nodes) == 24 and all(n.outcome != "unknown" for n in result.nodes)

    async def settled():
        status, body = await get_json(url)
        return body if status == 200 and body["status"] == "passed" else None

    body = await wait_for(settled, timeout=60)
    assert len(body["nodes"]) == 24
    assert not [n["unique_id"] for n in body["nodes"] if n["status"] == "running"]


async def test_run_timeout_bounds_the_whole_run_and_says_so(settings, project_copy, tmp_path):
    """A build that outlives RUN_TIMEOUT_SECONDS ends failed with that reason, the nodes
    dbt never reached are listed as not run, and its dbt is gone."""
    add_gate(project_copy, tmp_path / "never")
    (project_copy / "models" / "marts" / "after_gate.sql").write_text(
        "select * from {{ ref('gate') }}"
    )
    st = await Stack(msgspec.structs.replace(settings, run_timeout_seconds=20)).start()
    try:
        await deploy_and_wait(st.bus, project_copy, "slow")
        final = await asyncio.wait_for(
            client.run(st.bus, "slow", RunCommand(command=BuildCommand(), run_id="t1")), 120
        )
    finally:
        await st.stop()
    assert final.result.status == "failed"
    assert final.result.error == "timed out after 20s"
    nodes = {n.unique_id: n for n in final.result.nodes}
    gate, after = nodes[GATE], nodes["model.jaffle_shop.after_gate"]
    assert (gate.status, gate.message) == ("error", "timed out after 20s"), gate
    assert (after.status, after.outcome) == ("not run", "skipped"), after
    assert after.message == "not run: the run timed out after 20s before dbt reached it"
    assert not working_in(settings.runner_cache)

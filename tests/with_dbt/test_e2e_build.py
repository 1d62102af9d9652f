"""The vertical slice against real NATS, Postgres and dbt: deploy, build, query."""

from __future__ import annotations

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.helpers import deploy_and_wait, duckdb_tables, get_json, wait_for
from tests.support.paths import EXAMPLE

pytestmark = pytest.mark.dbt


async def _deploy(stack, path=EXAMPLE, project="jaffle_shop"):
    final = await deploy_and_wait(stack.bus, path, project)
    return final


async def test_example_builds_and_is_queryable(stack):
    deployed = await _deploy(stack)
    assert deployed.engine == "dbt-core-1x" and deployed.adapter == "duckdb"
    assert "models/marts/orders.sql" in deployed.files
    final = await client.run(stack.bus, "jaffle_shop", RunCommand(command=BuildCommand()))
    assert isinstance(final, ev.RunFinished)
    result = final.result
    assert result.status == "passed", result.error
    assert result.totals["warned"] == 1 and result.totals["failed"] == 0
    warned = [n for n in result.nodes if n.outcome == "warned"]
    assert warned[0].status == "warn" and "accepted_values_orders_status" in warned[0].unique_id
    assert len(result.nodes) == 23

    async def projected():
        status, body = await get_json(f"{stack.api_url}/v1/runs/{final.run_id}")
        return body if status == 200 and body["status"] == "passed" else None

    body = await wait_for(projected)
    assert len(body["nodes"]) == 23 and body["nodes_finished"] == 23
    by_id = {n["unique_id"]: n for n in body["nodes"]}
    assert by_id["model.jaffle_shop.orders"]["outcome"] == "passed"
    assert by_id["model.jaffle_shop.orders"]["status"] == "success"
    tables = duckdb_tables(stack.settings.default_duckdb)
    assert {"orders", "customers", "stg_orders", "raw_orders"} <= tables


async def test_error_severity_test_fails_the_run(stack):
    await _deploy(stack)
    cmd = RunCommand(command=BuildCommand(vars={"fail_error_test": True}))
    final = await client.run(stack.bus, "jaffle_shop", cmd)
    assert final.result.status == "failed"
    failed = {n.unique_id: n for n in final.result.nodes if n.outcome == "failed"}
    assert set(failed) == {"test.jaffle_shop.assert_positive_order_total"}
    assert failed["test.jaffle_shop.assert_positive_order_total"].status == "fail"
    assert final.result.invocation_args["vars"] == {"fail_error_test": True}

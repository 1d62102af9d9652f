"""Environment state and deferral against real dbt (the reference's tests 12 and 13)."""

from __future__ import annotations

import duckdb
import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RetryCommand, RunCommand

from tests.support.helpers import deploy_and_wait, get_json, wait_for
from tests.support.projects import FLAKY, add_model

pytestmark = pytest.mark.dbt

# Lets a run put what it builds into another schema with a var, as a scratch build does.
SCHEMA_MACRO = """
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- if var('target_schema', none) -%}{{ var('target_schema') }}
    {%- elif custom_schema_name is none -%}{{ target.schema }}
    {%- else -%}{{ custom_schema_name | trim }}{%- endif -%}
{%- endmacro %}
"""

ENV_KEY = "4:main|4:main|11:jaffle_shop|9:warehouse"


async def _run(stack, project="jaffle_shop", **build):
    finished: set[str] = set()

    async def on_event(event):
        if isinstance(event, ev.NodeFinished):
            finished.add(event.node.unique_id)

    requested_by = build.pop("requested_by", "")
    final = await client.run(
        stack.bus,
        project,
        RunCommand(command=BuildCommand(**build), requested_by=requested_by),
        on_event=on_event,
    )
    return final, {i for i in finished if not i.startswith("test.")}


async def _state(stack, project="jaffle_shop"):
    return await stack.bus.last_event(subjects.state_event(project, ENV_KEY, "published"))


async def _deploy(stack, path):
    await deploy_and_wait(stack.bus, path, "jaffle_shop")


def _tables(path, schema):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [schema]
            ).fetchall()
        }
    finally:
        con.close()


async def test_a_deferring_run_builds_one_model_into_another_schema(stack, project_copy):
    (project_copy / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    await _deploy(stack, project_copy)
    full, _ = await _run(stack)
    assert full.result.status == "passed"
    state = await _state(stack)
    assert state.run_id == full.run_id and state.run_results_digest
    assert state.environment.key() == ENV_KEY

    scratch = {"select": ["customers"], "vars": {"target_schema": "scratch"}}
    deferred, built = await _run(stack, defer=True, **scratch)
    assert deferred.result.status == "passed", deferred.result.error
    assert built == {"model.jaffle_shop.customers"}
    assert deferred.result.deferred_to == full.run_id
    assert "customers" in _tables(stack.settings.default_duckdb, "scratch")
    assert "orders" not in _tables(stack.settings.default_duckdb, "scratch")
    assert (await _state(stack)).run_id == full.run_id  # a deferring run never publishes

    plain, _ = await _run(stack, **scratch)
    assert plain.result.status == "failed"
    message = next(n.message for n in plain.result.nodes if n.outcome == "failed")
    assert "does not exist" in message and '"scratch"' in message

    async def listed():
        status, body = await get_json(f"{stack.api_url}/v1/projects/jaffle_shop/environments")
        return body["environments"] if body.get("environments") else None

    envs = await wait_for(listed)
    assert envs[0]["run_id"] == full.run_id and envs[0]["schema"] == "jaffle_shop"


async def test_state_modified_selects_nothing_then_exactly_the_change(stack, project_copy):
    await _deploy(stack, project_copy)
    full, _ = await _run(stack)
    assert full.result.status == "passed"
    unchanged, built = await _run(stack, select=["state:modified+"], defer=True)
    assert unchanged.result.status == "passed" and built == set()
    assert unchanged.result.nodes == []

    model = project_copy / "models" / "staging" / "stg_orders.sql"
    model.write_text(model.read_text().rstrip() + "\n-- edited: a comment changes the checksum\n")
    await _deploy(stack, project_copy)
    changed, built = await _run(stack, select=["state:modified+"], defer=True)
    assert changed.result.status == "passed", changed.result.error
    assert built == {
        "model.jaffle_shop.stg_orders",
        "model.jaffle_shop.orders",
        "model.jaffle_shop.customers",
    }


async def test_deferral_refusals(stack, project_copy):
    await _deploy(stack, project_copy)
    nothing, _ = await _run(stack, defer=True)
    assert isinstance(nothing, ev.RunRefused)
    assert "no state is published for project 'jaffle_shop'" in nothing.reason
    assert (
        "warehouse 'main', target 'main', schema 'jaffle_shop', database 'warehouse'"
        in nothing.reason
    )
    assert ENV_KEY not in nothing.reason

    no_defer, _ = await _run(stack, select=["state:modified+"])
    assert isinstance(no_defer, ev.RunRefused) and "add --defer" in no_defer.reason

    freshness, _ = await _run(stack, select=["source_status:fresher+"], defer=True)
    assert isinstance(freshness, ev.RunRefused) and "sources.json" in freshness.reason

    (project_copy / "jetdbt.yaml").write_text("select: ['state:modified+']\n")
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert isinstance(refused, ev.DeployRefused)
    assert "descriptor's select/exclude" in refused.reason


async def test_a_node_retry_recovered_state_refuses_result_selectors(stack, project_copy, tmp_path):
    add_model(project_copy, "flaky", FLAKY, {"marker_file": "../seen-once"})
    (project_copy / "jetdbt.yaml").write_text("retry_failed_nodes: {attempts: 1}\n")
    await _deploy(stack, project_copy)
    recovered, _ = await _run(stack)
    assert recovered.result.status == "passed"
    state = await _state(stack)
    assert state.run_id == recovered.run_id and state.run_results_digest is None
    refused, _ = await _run(stack, select=["result:error+"], defer=True)
    assert isinstance(refused, ev.RunRefused)
    assert f"run {recovered.run_id!r}" in refused.reason and "result:" in refused.reason


async def test_a_retry_and_a_templated_schema_publish_nothing(stack, project_copy, tmp_path):
    gate = tmp_path / "broken"
    gate.touch()
    from tests.support.projects import GATED

    add_model(project_copy, "gated", GATED, {"break_file": str(gate)})
    await _deploy(stack, project_copy)
    failed, _ = await _run(stack, requested_by="ana")
    assert failed.result.status == "failed" and await _state(stack) is None
    gate.unlink()
    resumed = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=RetryCommand(dbt_retry_job=failed.run_id), requested_by="ana"),
    )
    assert resumed.result.status == "passed"
    assert await _state(stack) is None

    (project_copy / "jetdbt.yaml").write_text(
        "profile:\n  schema: \"{{ env_var('SHOP_SCHEMA', 'main') }}\"\n"
    )
    await _deploy(stack, project_copy)
    templated, _ = await _run(stack)
    assert templated.result.status == "passed"
    assert await _state(stack) is None
    refused, _ = await _run(stack, defer=True)
    assert isinstance(refused, ev.RunRefused) and "template" in refused.reason


async def test_state_selectors_on_a_parse_are_refused(stack):
    """A parse never defers, so it takes no selection at all: one naming a state is refused."""
    import asyncio

    seen: asyncio.Queue = asyncio.Queue()

    async def collect(msg):
        seen.put_nowait(ev.decode(msg.data))

    sub = await stack.bus.nc.subscribe("dbt.evt.run.jaffle_shop.>", cb=collect)
    await stack.bus.js.publish(
        "dbt.cmd.run.jaffle_shop", b'{"command": {"label": "parse", "select": ["state:modified+"]}}'
    )
    refused = await asyncio.wait_for(seen.get(), 30)
    await sub.unsubscribe()
    assert isinstance(refused, ev.RunRefused)
    assert "unknown field `select`" in refused.reason and "$.command" in refused.reason

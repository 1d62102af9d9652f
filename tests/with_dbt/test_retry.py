"""Retries against real dbt: in-run node retry, and dbt retry of a named run from any runner."""

from __future__ import annotations

import msgspec
import pytest
import yaml
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RetryCommand, RunCommand

from tests.support.helpers import deploy_and_wait, get_json, wait_for
from tests.support.projects import FLAKY, GATED, add_model

pytestmark = pytest.mark.dbt


class Seen:
    def __init__(self):
        self.started: list[tuple[int, str]] = []
        self.runner = ""

    async def __call__(self, event):
        if isinstance(event, ev.NodeStarted):
            self.started.append((event.round, event.unique_id))
        elif isinstance(event, ev.RunStarted):
            self.runner = event.runner


def _settings(settings, tmp_path, name: str):
    warehouses = tmp_path / "warehouses.yaml"
    warehouses.write_text(
        yaml.safe_dump(
            {"warehouses": {"main": {"type": "duckdb", "path": str(tmp_path / "shared.duckdb")}}}
        )
    )
    return msgspec.structs.replace(
        settings, home=tmp_path / name, runner_name=name, warehouses_file=warehouses
    )


async def test_dbt_retry_from_another_runner_rebuilds_only_what_failed(
    settings, tmp_path, project_copy
):
    gate = tmp_path / "broken"
    gate.touch()
    add_model(project_copy, "gated", GATED, {"break_file": str(gate)})
    first = await Stack(_settings(settings, tmp_path, "runner-a")).start()
    try:
        await deploy_and_wait(first.bus, project_copy, "shop")
        failed = await client.run(
            first.bus,
            "shop",
            RunCommand(command=BuildCommand(vars={"note": "as submitted"}), requested_by="ana"),
        )
        assert failed.result.status == "failed"
        outcomes = {n.unique_id: n.outcome for n in failed.result.nodes}
        assert outcomes["model.jaffle_shop.gated"] == "failed"
        assert outcomes["model.jaffle_shop.gated_after"] == "skipped"
    finally:
        await first.stop()
    gate.unlink()  # the cause is fixed

    second = await Stack(_settings(settings, tmp_path, "runner-b")).start()
    try:
        assert not (tmp_path / "runner-b" / "runner" / "bundles").exists()
        seen = Seen()
        resumed = await client.run(
            second.bus,
            "shop",
            RunCommand(command=RetryCommand(dbt_retry_job=failed.run_id), requested_by="ana"),
            on_event=seen,
        )
        assert isinstance(resumed, ev.RunFinished), resumed
        assert resumed.result.status == "passed" and resumed.result.mode == "retry"
        assert seen.runner == "runner-b"
        assert {uid for _, uid in seen.started} == {
            "model.jaffle_shop.gated",
            "model.jaffle_shop.gated_after",
        }
        assert resumed.result.invocation_args["vars"] == {"note": "as submitted"}

        async def state():
            status, body = await get_json(f"{second.api_url}/v1/projects/shop/retry-state")
            rows = body.get("retry_state", [])
            return rows if rows and rows[0]["run_id"] == resumed.run_id else None

        rows = await wait_for(state)
        assert rows[0]["principal"] == "ana"
    finally:
        await second.stop()


async def test_node_retry_recovers_a_transient_failure_in_the_same_run(
    stack, project_copy, tmp_path
):
    add_model(project_copy, "flaky", FLAKY, {"marker_file": "../seen-once"})
    (project_copy / "jetdbt.yaml").write_text(
        "retry_failed_nodes: {attempts: 2, delay_seconds: 0.2}\n"
    )
    await deploy_and_wait(stack.bus, project_copy, "jaffle_shop")
    seen = Seen()
    final = await client.run(
        stack.bus, "jaffle_shop", RunCommand(command=BuildCommand()), on_event=seen
    )
    assert final.result.status == "passed", [
        (n.unique_id, n.round, n.status, n.message)
        for n in final.result.nodes
        if n.outcome != "passed"
    ] + seen.started
    ids = [n.unique_id for n in final.result.nodes]
    assert len(ids) == len(set(ids)) == 25
    by_id = {n.unique_id: n for n in final.result.nodes}
    assert (by_id["model.jaffle_shop.flaky"].outcome, by_id["model.jaffle_shop.flaky"].round) == (
        "passed",
        1,
    )
    assert {uid for r, uid in seen.started if r == 1} == {
        "model.jaffle_shop.flaky",
        "model.jaffle_shop.flaky_after",
    }


async def test_a_failing_data_test_is_not_retried_when_its_model_was_not_rebuilt(
    stack, project_copy, tmp_path
):
    add_model(project_copy, "flaky", FLAKY, {"marker_file": "../seen-once"})
    (project_copy / "jetdbt.yaml").write_text("retry_failed_nodes: {attempts: 1}\n")
    await client.deploy(stack.bus, project_copy, "jaffle_shop")
    seen = Seen()
    final = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=BuildCommand(vars={"fail_error_test": True})),
        on_event=seen,
    )
    assert final.result.status == "failed"
    data_test = "test.jaffle_shop.assert_positive_order_total"
    assert [r for r, uid in seen.started if uid == data_test] == [0]
    by_id = {n.unique_id: n for n in final.result.nodes}
    assert by_id[data_test].outcome == "failed" and by_id[data_test].round == 0
    assert by_id["model.jaffle_shop.flaky"].outcome == "passed"


async def test_retry_refusals(stack, project_copy):
    await client.deploy(stack.bus, project_copy, "jaffle_shop")
    nothing = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=RetryCommand(dbt_retry_job="r-none"), requested_by="bo"),
    )
    assert isinstance(nothing, ev.RunRefused)
    assert "nothing is saved to retry" in nothing.reason and "'bo'" in nothing.reason

    hidden = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=BuildCommand(select=["raw_orders"]), requested_by="bo", hidden=True),
    )
    assert hidden.result.status == "passed"
    after_hidden = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=RetryCommand(dbt_retry_job=hidden.run_id), requested_by="bo"),
    )
    assert isinstance(after_hidden, ev.RunRefused)
    assert "nothing is saved to retry" in after_hidden.reason

    saved = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=BuildCommand(select=["raw_orders"]), requested_by="bo"),
    )
    wrong = await client.run(
        stack.bus,
        "jaffle_shop",
        RunCommand(command=RetryCommand(dbt_retry_job="some-other-run"), requested_by="bo"),
    )
    assert isinstance(wrong, ev.RunRefused)
    assert "'some-other-run'" in wrong.reason and f"'{saved.run_id}'" in wrong.reason

"""Selection and test behaviour, asserted from the node events of real dbt runs."""

from __future__ import annotations

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.helpers import deploy_and_wait

pytestmark = pytest.mark.dbt

SEEDS_AND_ORDERS = {"seed.jaffle_shop.raw_orders", "model.jaffle_shop.stg_orders"}


async def _run(stack, project, **build) -> tuple[ev.Event, set[str]]:
    """Run and return the final event with the unique ids of every NodeFinished seen."""
    finished: set[str] = set()

    async def on_event(event):
        if isinstance(event, ev.NodeFinished):
            finished.add(event.node.unique_id)

    args = build.pop("args", {})
    final = await client.run(
        stack.bus, project, RunCommand(command=BuildCommand(**build), args=args), on_event=on_event
    )
    return final, finished


def _executable(ids: set[str]) -> set[str]:
    return {i for i in ids if not i.startswith("test.")}


async def _deploy(stack, path, descriptor: str | None):
    if descriptor is not None:
        (path / "jetdbt.yaml").write_text(descriptor)
    await deploy_and_wait(stack.bus, path, "jaffle_shop")


async def test_descriptor_selection_override_and_equal_override(stack, project_copy):
    (project_copy / "selectors.yml").write_text(
        "selectors:\n  - name: customers_only\n    definition: '+stg_customers'\n"
    )
    await _deploy(
        stack,
        project_copy,
        "select: ['+stg_orders']\nexclude: ['stg_payments']\nselector: customers_only\n",
    )
    # The descriptor's selector wins over its select, as dbt resolves --selector.
    final, ids = await _run(stack, "jaffle_shop")
    assert final.result.status == "passed"
    assert _executable(ids) == {"seed.jaffle_shop.raw_customers", "model.jaffle_shop.stg_customers"}
    # An override equal to the descriptor's own value is no override: the selector stays.
    final, ids = await _run(stack, "jaffle_shop", select=["+stg_orders"], exclude=["stg_payments"])
    assert _executable(ids) == {"seed.jaffle_shop.raw_customers", "model.jaffle_shop.stg_customers"}
    # A differing override replaces select/exclude and drops the selector.
    final, ids = await _run(stack, "jaffle_shop", select=["+stg_orders"])
    assert final.result.status == "passed"
    assert _executable(ids) == SEEDS_AND_ORDERS
    assert all(n.unique_id in ids for n in final.result.nodes)


async def test_descriptor_select_and_exclude(stack, project_copy):
    await _deploy(
        stack, project_copy, "select: ['+stg_orders', '+stg_payments']\nexclude: ['raw_payments']\n"
    )
    final, ids = await _run(stack, "jaffle_shop")
    assert _executable(ids) == SEEDS_AND_ORDERS | {"model.jaffle_shop.stg_payments"}
    # stg_payments' own source was excluded and was never seeded here, so it fails.
    assert final.result.status == "failed"


async def test_empty_and_misspelled_selections_are_refused(stack, project_copy):
    await _deploy(stack, project_copy, None)
    refused, ids = await _run(stack, "jaffle_shop", select=["stg_order"])
    assert isinstance(refused, ev.RunRefused) and not ids
    assert "select=['stg_order']" in refused.reason and "matches no nodes" in refused.reason
    refused, _ = await _run(stack, "jaffle_shop", select=["tag:no_such_tag"])
    assert isinstance(refused, ev.RunRefused) and "matches no nodes" in refused.reason


async def test_after_all_runs_then_tests_and_fails_on_error_test(stack, project_copy):
    await _deploy(stack, project_copy, "test_behavior: after_all\n")
    final, ids = await _run(stack, "jaffle_shop")
    assert final.result.status == "passed" and final.result.mode == "after_all"
    assert (
        "model.jaffle_shop.orders" in ids and "test.jaffle_shop.assert_positive_order_total" in ids
    )
    assert "seed.jaffle_shop.raw_orders" in ids
    assert final.result.totals["warned"] == 1
    failing, _ = await _run(stack, "jaffle_shop", vars={"fail_error_test": True})
    assert failing.result.status == "failed"
    failed = [n.unique_id for n in failing.result.nodes if n.outcome == "failed"]
    assert failed == ["test.jaffle_shop.assert_positive_order_total"], [
        n.message for n in failing.result.nodes if n.outcome == "failed"
    ]
    assert any(
        n.unique_id == "model.jaffle_shop.orders" and n.outcome == "passed"
        for n in failing.result.nodes
    )


async def test_none_runs_no_tests_and_placeholders_take_run_args(stack, project_copy):
    await _deploy(
        stack, project_copy, "test_behavior: none\nvars:\n  fail_error_test: '{{ fail_tests }}'\n"
    )
    missing, _ = await _run(stack, "jaffle_shop")
    assert isinstance(missing, ev.RunRefused) and "{{ fail_tests }}" in missing.reason
    final, ids = await _run(stack, "jaffle_shop", args={"fail_tests": True})
    assert final.result.status == "passed" and final.result.mode == "none"
    assert "model.jaffle_shop.orders" in ids and "seed.jaffle_shop.raw_orders" in ids
    assert not any(i.startswith("test.") for i in ids)
    assert final.result.invocation_args["args"] == {"fail_tests": True}

"""Every dbt command a run may be, against one deployed project on one real stack: each
gives its structured result, a show its rows, a freshness check warns on a stale source."""

from __future__ import annotations

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import CommandRejected, RunCommand, dbt_command, decode_run

from tests.support.helpers import deploy_and_wait
from tests.support.stale_source import SOURCE, add_stale_source

pytestmark = pytest.mark.dbt

MACRO = """
{% macro greet(name) %}
  {% do log("hello " ~ name, info=True) %}
{% endmacro %}
"""
SNAPSHOT = """
{% snapshot orders_snapshot %}
{{ config(target_schema='main', unique_key='order_id', strategy='check', check_cols=['status']) }}
select * from {{ ref('stg_orders') }}
{% endsnapshot %}
"""


def _extend(project):
    add_stale_source(project)
    (project / "macros" / "greet.sql").write_text(MACRO)
    (project / "snapshots").mkdir()
    (project / "snapshots" / "orders_snapshot.sql").write_text(SNAPSHOT)


async def _run(stack, name: str, **fields) -> ev.Event:
    command = RunCommand(command=dbt_command(name, **fields))
    return await client.run(stack.bus, "shop", command, timeout=600)


async def test_every_dbt_command_gives_its_structured_result(stack, project_copy):
    _extend(project_copy)
    await deploy_and_wait(stack.bus, project_copy, "shop")

    seeded = await _run(stack, "seed")
    assert seeded.result.status == "passed", seeded.result.error
    assert seeded.result.mode == "seed"
    assert {n.resource_type for n in seeded.result.nodes} == {"seed"}
    assert seeded.result.totals["passed"] == 3

    models = await _run(stack, "run", select=["+orders"], vars={"x": 1})
    assert models.result.status == "passed", [(n.name, n.message) for n in models.result.nodes]
    assert models.result.mode == "run"
    assert {n.name for n in models.result.nodes} == {"stg_orders", "stg_payments", "orders"}
    assert models.result.invocation_args["vars"] == {"x": 1}
    # Its node events were published live, as a build's are.
    finished = await stack.bus.last_event(subjects.node_event("shop", models.run_id, "finished"))
    assert isinstance(finished, ev.NodeFinished) and finished.node.resource_type == "model"

    tested = await _run(stack, "test", select=["stg_orders"])
    assert tested.result.mode == "test"
    assert tested.result.nodes and {n.resource_type for n in tested.result.nodes} == {"test"}

    nothing = await _run(stack, "test", select=["no_such_model"])
    assert isinstance(nothing, ev.RunRefused) and "matches no nodes" in nothing.reason

    snap = await _run(stack, "snapshot")
    assert snap.result.status == "passed", snap.result.error
    assert [n.name for n in snap.result.nodes] == ["orders_snapshot"]

    fresh = await _run(stack, "source freshness")
    assert fresh.result.mode == "source_freshness"
    (source,) = fresh.result.nodes
    assert source.unique_id == SOURCE
    assert source.status == "warn" and source.outcome == "warned"
    assert "max_loaded_at 2018-" in source.message and "warn after 1 day" in source.message
    assert fresh.result.status == "passed"  # a warning is not a failure, as in dbt

    op = await _run(stack, "run-operation", macro="greet", macro_args={"name": "ops"})
    assert op.result.status == "passed", op.result.error
    assert op.result.mode == "run_operation" and op.result.exit_code == 0

    docs = await _run(stack, "docs generate")
    assert docs.result.status == "passed", docs.result.error
    assert docs.result.mode == "docs_generate"

    shown = await _run(stack, "show", select=["orders"], limit=3)
    assert shown.result.status == "passed", shown.result.error
    assert len(shown.result.preview) == 3
    assert {"order_id", "customer_id", "status"} <= set(shown.result.preview[0])

    # The retry state is the last run a `jetdbt retry` may resume: a show or a freshness
    # check does not take a build's place there.
    asked = await stack.bus.last_event(subjects.run_event("shop", snap.run_id, "requested"))
    saved = await stack.bus.last_event(subjects.retry_event("shop", asked.requested_by, "saved"))
    assert saved.run_id == snap.run_id and saved.command["label"] == "snapshot"


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'{"command": {"label": "show"}}', "show needs a select"),
        (b'{"command": {"label": "seed", "defer": true}}', "seed takes no defer"),
        (b'{"command": {"label": "test", "full_refresh": true}}', "test takes no full_refresh"),
        (b'{"command": {"label": "run_operation", "macro": "--x"}}', "a macro name is"),
        (b'{"command": {"label": "run_operation", "macro": "m", "select": ["a"]}}', "no select"),
        (b'{"command": {"label": "show", "select": ["a"], "limit": 100000}}', "from 1 to 500"),
        (b'{"command": {"label": "run", "select": ["--empty"]}}', "cannot start with '-'"),
    ],
)
def test_a_malformed_dbt_command_is_refused_naming_why(body, reason):
    with pytest.raises(CommandRejected, match=reason):
        decode_run(body)

"""Which nodes a command would run (shared/runs/planned.py): the one rule the CLI's planned
total and a cancelled run's never-reached nodes share. The end to end of a cancelled
build is tests/with_dbt/test_first_hour_answers.py; here, the rule's edges."""

from __future__ import annotations

import msgspec
import pytest
from jetdbt.services.runner.after.results import Overlay
from jetdbt.shared.bus.events import NodeResult
from jetdbt.shared.runs import planned
from jetdbt.shared.runs.outcomes import NODE_NOT_RUN

MANIFEST = msgspec.json.encode(
    {
        "nodes": {
            "model.p.orders": {
                "resource_type": "model",
                "name": "orders",
                "relation_name": '"db"."main"."orders"',
                "config": {"materialized": "table"},
            },
            "model.p.inline": {"resource_type": "model", "config": {"materialized": "ephemeral"}},
            "seed.p.raw": {"resource_type": "seed", "name": "raw", "config": {}},
            "test.p.not_null": {"resource_type": "test", "name": "not_null", "config": {}},
            "operation.p.hook": {"resource_type": "operation"},
            "analysis.p.a": {"resource_type": "analysis"},
        },
        "sources": {"source.p.s.t": {"resource_type": "source"}},
        "unit_tests": {"unit_test.p.orders.u": {"resource_type": "unit_test", "name": "u"}},
    }
)


def test_a_build_runs_every_executed_node_but_ephemeral_models():
    assert sorted(planned.nodes(MANIFEST)) == [
        "model.p.orders",
        "seed.p.raw",
        "test.p.not_null",
        "unit_test.p.orders.u",
    ]


def test_each_command_runs_its_own_resource_types():
    def ran(label: str, behaviour: str = "build") -> list[str]:
        return sorted(planned.nodes(MANIFEST, planned.executes(label, behaviour)))

    assert ran("run") == ["model.p.orders"]
    assert ran("test") == ["test.p.not_null", "unit_test.p.orders.u"]
    assert ran("build", "none") == ["model.p.orders", "seed.p.raw"]
    assert ran("build", "after_all") == ran("build")
    assert ran("show") == ran("run_operation") == ran("source_freshness") == []


def test_a_resolved_selection_narrows_to_what_the_command_runs():
    """dbt ls lists sources and ephemeral models too, and may name a node the manifest lacks."""
    among = ["source.p.s.t", "model.p.inline", "model.p.orders", "model.p.gone"]
    assert list(planned.nodes(MANIFEST, among=among)) == ["model.p.orders"]


def test_a_manifest_of_another_shape_is_refused_not_half_read():
    with pytest.raises(msgspec.DecodeError):
        planned.nodes(b'{"nodes": {"model.p.m": {"resource_type": 7}}}')


def test_only_nodes_no_invocation_reported_on_are_marked_not_run():
    overlay = Overlay()
    done = NodeResult(unique_id="seed.p.raw", status="success", outcome="passed")
    overlay.nodes[done.unique_id] = done
    overlay.not_reached(planned.nodes(MANIFEST), "not run: cancelled")
    nodes = {n.unique_id: n for n in overlay.in_order()}
    assert nodes["seed.p.raw"] is done
    orders = nodes["model.p.orders"]
    assert (orders.status, orders.outcome, orders.message) == (
        NODE_NOT_RUN,
        "skipped",
        "not run: cancelled",
    )
    assert (orders.name, orders.relation) == ("orders", '"db"."main"."orders"')

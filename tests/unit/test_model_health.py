"""get_model_health's verdict: the sources upstream of a node at any depth, and the worst of
its last run, its tests' last outcomes and its sources' freshness, with the reasons."""

from __future__ import annotations

from jetdbt.services.mcp.model_health import upstream_sources, verdict

SOURCE, OTHER = "source.shop.raw.orders", "source.shop.raw.unread"
NODES = [
    {"unique_id": SOURCE, "resource_type": "source"},
    {"unique_id": OTHER, "resource_type": "source"},
    {"unique_id": "model.shop.stg", "resource_type": "model"},
    {"unique_id": "model.shop.orders", "resource_type": "model"},
]
EDGES = [
    {"parent": SOURCE, "child": "model.shop.stg"},
    {"parent": "model.shop.stg", "child": "model.shop.orders"},
    {"parent": "model.shop.orders", "child": "model.shop.stg"},  # a cycle ends all the same
]


def _run(outcome: str) -> dict:
    return {"run_id": "r1", "outcome": outcome, "status": "success"}


def _source(outcome: str, status: str) -> dict:
    return {"unique_id": SOURCE, "freshness": {"outcome": outcome, "status": status}}


def test_sources_are_found_through_every_parent_and_only_upstream():
    found = upstream_sources("model.shop.orders", NODES, EDGES)
    assert [n["unique_id"] for n in found] == [SOURCE]


def test_the_worst_outcome_decides_and_says_why():
    failing_test = {"name": "positive", "outcome": "failed", "run_id": "r2"}
    assert verdict([_run("passed")], [failing_test], [_source("warned", "warn")]) == (
        "failing",
        ["test positive failed in run r2"],
    )
    assert verdict([_run("passed")], [], [_source("warned", "warn")]) == (
        "warning",
        [f"source {SOURCE}: warn"],
    )
    assert verdict([_run("passed")], [], [{"unique_id": SOURCE, "freshness": None}]) == (
        "healthy",
        [],
    )
    assert verdict([], [], [])[0] == "unknown"
    assert verdict([_run("failed")], [], []) == ("failing", ["its last run r1: failed"])

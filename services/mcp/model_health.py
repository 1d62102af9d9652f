"""`get_model_health`: how a node has been doing, from the API's projections, no run started.

Its outcome and duration in its project's latest runs that built or tested it, the last
outcome of each of its tests, and the last freshness check of every source upstream of it,
with one word an agent can branch on (`failing`, `warning`, `healthy`, `unknown`: never
run) and the reasons for it.
"""

from __future__ import annotations

import msgspec
from jetdbt.services.api import schemas
from jetdbt.services.api.node_routes import HISTORY_RUNS
from jetdbt.services.mcp.api_client import Api, route_path
from jetdbt.services.mcp.model_details import GRAPH, find_node, tests_of, whole_graph

__all__ = [
    "ModelHealth",
    "model_health",
    "upstream_sources",
    "verdict",
    "ROUTES",
    "HISTORY",
    "RUNS_SEEN",
    "TESTS_READ",
    "LOOKS_ONLY",
]

HISTORY = "/v1/projects/{project}/nodes/{unique_id}/history"
ROUTES = (("GET", GRAPH), ("GET", HISTORY))
RUNS_SEEN = 10  # the node's latest runs its health reads
# Runs that only look at a node, never build or test it: they say nothing of its health.
LOOKS_ONLY = frozenset({"show", "compile"})
TESTS_READ = 100  # tests whose last outcome is read (each one a call of the node route)


class TestHealth(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One test of the node and how it ended last (null: never ran), in which run."""

    unique_id: str
    name: str
    outcome: str | None
    run_id: str | None


class SourceHealth(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A source upstream of the node and its last freshness check (null: never checked)."""

    unique_id: str
    freshness: schemas.SourceFreshness | None


class ModelHealth(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`runs` newest first; `failing_tests` the tests whose last outcome was failed;
    `tests_total` counts every test, of which the first TESTS_READ are read."""

    project: str
    unique_id: str
    health: str
    reasons: list[str]
    runs: list[schemas.NodeHistory]
    tests: list[TestHealth]
    tests_total: int
    failing_tests: list[str]
    sources: list[SourceHealth]


def upstream_sources(uid: str, nodes: list[dict], edges: list[dict]) -> list[dict]:
    parents: dict[str, list[str]] = {}
    for e in edges:
        parents.setdefault(e["child"], []).append(e["parent"])
    seen, todo = {uid}, [uid]
    while todo:
        for parent in parents.get(todo.pop(), []):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return [n for n in nodes if n["unique_id"] in seen and n["resource_type"] == "source"]


def verdict(runs: list[dict], tests: list[dict], sources: list[dict]) -> tuple[str, list[str]]:
    """The worst of: the node's last outcome, its tests' last ones, its sources' checks."""
    said = []
    if runs:
        got = runs[0]["outcome"] or runs[0]["status"]
        said.append((got, f"its last run {runs[0]['run_id']}: {got}"))
    said += [(t["outcome"], f"test {t['name']} {t['outcome']} in run {t['run_id']}") for t in tests]
    said += [
        (s["freshness"]["outcome"], f"source {s['unique_id']}: {s['freshness']['status']}")
        for s in sources
        if s["freshness"]
    ]
    for word, outcome in (("failing", "failed"), ("warning", "warned")):
        reasons = [why for got, why in said if got == outcome]
        if reasons:
            return word, reasons
    if not runs:
        return "unknown", ["the node has not run in its project's runs yet"]
    return "healthy", []


async def model_health(api: Api, auth: str, args: dict) -> dict:
    project = args["project"]
    _, nodes, edges = await whole_graph(api, auth, project)
    uid = find_node(project, nodes, args["node"])["unique_id"]
    tests = tests_of(uid, nodes, edges)

    async def ran(node: str) -> list[dict]:
        """The node's latest runs that built or tested it (a compile passes its tests)."""
        where = {"project": project, "unique_id": node}
        query = {"limit": HISTORY_RUNS[1]}
        answer = await api.call(auth, "GET", route_path(HISTORY, where), query=query)
        return [h for h in answer["history"] if h["command"] not in LOOKS_ONLY]

    history = (await ran(uid))[:RUNS_SEEN]
    read = []
    for test in tests[:TESTS_READ]:
        runs = await ran(test["unique_id"])
        read.append((test, runs[0] if runs else None))
    test_health = [
        {
            "unique_id": t["unique_id"],
            "name": t["name"],
            "outcome": last["outcome"] if last else None,
            "run_id": last["run_id"] if last else None,
        }
        for t, last in read
    ]
    sources = [
        {"unique_id": s["unique_id"], "freshness": s["freshness"]}
        for s in upstream_sources(uid, nodes, edges)
    ]
    health, reasons = verdict(history, test_health, sources)
    answer = {
        "project": project,
        "unique_id": uid,
        "health": health,
        "reasons": reasons,
        "runs": history,
        "tests": test_health,
        "tests_total": len(tests),
        "failing_tests": [t["unique_id"] for t in test_health if t["outcome"] == "failed"],
        "sources": sources,
    }
    return msgspec.to_builtins(msgspec.convert(answer, ModelHealth))

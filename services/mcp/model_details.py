"""`get_model`: one node of a project's graph with what an agent asks about it, read from
the graph and run routes: its parents, children, columns, tests, relation, last outcomes."""

from __future__ import annotations

import msgspec
from jetdbt.services.api import schemas
from jetdbt.services.mcp.api_client import Api, ApiRefused, route_path

__all__ = [
    "ModelDetails",
    "NodeRun",
    "model_details",
    "whole_graph",
    "find_node",
    "tests_of",
    "GRAPH",
    "RUNS",
    "RUN",
    "RUNS_READ",
]

GRAPH = "/v1/projects/{project}/graph"
RUNS = "/v1/projects/{project}/runs"
RUN = "/v1/runs/{run_id}"
RUNS_READ = 10  # the project's latest runs searched for the node's last outcomes
_PRODUCING = ("model", "seed", "snapshot")


class NodeRun(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The node in one run: the run's id and status, and the node's row of it."""

    run_id: str
    run_status: str
    node: schemas.RunNode


class ModelDetails(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One node of the latest deployed graph; `last_runs` newest first."""

    project: str
    version: str
    node: schemas.GraphNode
    parents: list[schemas.Edge]
    children: list[schemas.Edge]
    tests: list[schemas.GraphNode]
    last_runs: list[NodeRun]


async def whole_graph(api: Api, auth: str, project: str) -> tuple[dict, list, list]:
    path = route_path(GRAPH, {"project": project})
    page = await api.call(auth, "GET", path)
    head, nodes, edges = page, list(page["nodes"]), list(page["edges"])
    while page["next"] is not None:
        page = await api.call(auth, "GET", path, query=page["next"])
        nodes += page["nodes"]
        edges += page["edges"]
    return head, nodes, edges


def find_node(project: str, nodes: list[dict], wanted: str) -> dict:
    """By unique_id, else by the name of a model, seed or snapshot (refused when two share it)."""
    for node in nodes:
        if node["unique_id"] == wanted:
            return node
    named = [n for n in nodes if n["name"] == wanted and n["resource_type"] in _PRODUCING]
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(n["unique_id"] for n in named)
        raise ApiRefused(400, f"{wanted!r} names {len(named)} nodes of {project!r}: {ids}")
    raise ApiRefused(
        404, f"project {project!r} has no node {wanted!r} (give a unique_id or a model's name)"
    )


def tests_of(uid: str, nodes: list[dict], edges: list[dict]) -> list[dict]:
    """The tests of node `uid`: its children that are tests."""
    by_id = {n["unique_id"]: n for n in nodes}
    children = (by_id.get(e["child"]) for e in edges if e["parent"] == uid)
    return [c for c in children if c is not None and c["resource_type"] == "test"]


async def model_details(api: Api, auth: str, project: str, node: str) -> dict:
    head, nodes, edges = await whole_graph(api, auth, project)
    found = find_node(project, nodes, node)
    uid = found["unique_id"]
    children = [e for e in edges if e["parent"] == uid]
    tests = tests_of(uid, nodes, edges)
    runs = await api.call(
        auth, "GET", route_path(RUNS, {"project": project}), query={"limit": RUNS_READ}
    )
    last_runs = []
    for run in runs["runs"]:
        full = await api.call(auth, "GET", route_path(RUN, {"run_id": run["run_id"]}))
        for row in full["nodes"]:
            if row["unique_id"] == uid:
                last_runs.append(
                    {"run_id": full["run_id"], "run_status": full["status"], "node": row}
                )
    details = {
        "project": project,
        "version": head["version"],
        "node": found,
        "parents": [e for e in edges if e["child"] == uid],
        "children": children,
        "tests": tests,
        "last_runs": last_runs,
    }
    return msgspec.to_builtins(msgspec.convert(details, ModelDetails))

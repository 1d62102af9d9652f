"""`show` and `compile`: an agent's preview of a node's rows and its compiled SQL, each a real
run of the project (as `jetdbt run --command show|compile` starts it), answered when it ends.

The node is looked up in the deployed graph first, so a misspelled name is a 404 naming it
and no run. The tool waits at most WAIT_SECONDS for the run: a run still queued or running
then is answered as it stands (`ended` false), its id to follow with get_run, never a
call that hangs an agent. Every call is one of the API's routes with the caller's token.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from jetdbt.services.mcp.api_client import Api, ApiRefused, route_path
from jetdbt.services.mcp.model_details import GRAPH, RUN, find_node, whole_graph
from jetdbt.shared.bus.commands import MAX_SHOW_LIMIT

__all__ = [
    "Preview",
    "Compiled",
    "preview",
    "compiled",
    "RUNS_POST",
    "NODE",
    "WAIT_SECONDS",
    "SHOW_ROUTES",
    "COMPILE_ROUTES",
    "LIMIT_SCHEMA",
]

RUNS_POST = "/v1/projects/{project}/runs"
NODE = "/v1/runs/{run_id}/nodes/{unique_id}"
# How long a call waits for its run to end: under the minute an agent's client waits for an
# answer, longer than a show or a compile takes on an idle runner.
WAIT_SECONDS = 50.0
_POLL_SECONDS = 0.5
SHOW_ROUTES = (("GET", GRAPH), ("POST", RUNS_POST), ("GET", RUN))
COMPILE_ROUTES = (*SHOW_ROUTES, ("GET", NODE))
LIMIT_SCHEMA = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_SHOW_LIMIT,
    "default": 5,
    "description": f"rows to preview (dbt show --limit; at most {MAX_SHOW_LIMIT})",
}


class _NodeRun(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The run an agent's call started for one node: its id and status (`ended` false: it
    had not ended after WAIT_SECONDS; poll get_run), and why it did not pass, if it did not
    (its refusal, its error, the node's own dbt message)."""

    project: str
    unique_id: str
    run_id: str
    status: str
    ended: bool
    error: str | None


class Preview(_NodeRun, kw_only=True, forbid_unknown_fields=True):
    """`show`'s answer: the node's first rows as dbt printed them (empty until the run ends)."""

    rows: list[dict[str, Any]]


class Compiled(_NodeRun, kw_only=True, forbid_unknown_fields=True):
    """`compile`'s answer: the SQL dbt compiled for the node (null until the run ends)."""

    compiled_code: str | None


async def _ended(api: Api, auth: str, run_id: str) -> dict | None:
    """The run once it ended, else its latest reading (None: not recorded yet) when
    WAIT_SECONDS are up."""
    deadline = time.monotonic() + WAIT_SECONDS
    run = None
    while True:
        try:
            run = await api.call(auth, "GET", route_path(RUN, {"run_id": run_id}))
        except ApiRefused as exc:
            if exc.status != 404:  # not folded yet: a 404 until the projection has it
                raise
        if (run is not None and run["finished_at"]) or time.monotonic() > deadline:
            return run
        await asyncio.sleep(_POLL_SECONDS)


def _why(run: dict | None, uid: str) -> str | None:
    if run is None or run["status"] == "passed":
        return None
    mine = next((n for n in run["nodes"] if n["unique_id"] == uid), {})
    result = run.get("result") or {}
    return run.get("refused_reason") or mine.get("message") or result.get("error")


async def _run_node(api: Api, auth: str, args: dict, command: dict) -> tuple[dict, dict]:
    """Start `command` over the node `args["node"]` names, wait for it: (answer, run)."""
    project = args["project"]
    _, nodes, _ = await whole_graph(api, auth, project)
    node = find_node(project, nodes, args["node"])
    body = {"command": {**command, "select": [node["name"]]}}
    accepted = await api.call(auth, "POST", route_path(RUNS_POST, {"project": project}), body=body)
    run = await _ended(api, auth, accepted["run_id"])
    answer = {
        "project": project,
        "unique_id": node["unique_id"],
        "run_id": accepted["run_id"],
        "status": run["status"] if run else "requested",
        "ended": bool(run and run["finished_at"]),
        "error": _why(run, node["unique_id"]),
    }
    return answer, run or {}


async def preview(api: Api, auth: str, args: dict) -> dict:
    limit = args.get("limit", LIMIT_SCHEMA["default"])
    answer, run = await _run_node(api, auth, args, {"label": "show", "limit": limit})
    rows = (run.get("result") or {}).get("preview") or []
    return msgspec.to_builtins(msgspec.convert({**answer, "rows": rows}, Preview))


async def compiled(api: Api, auth: str, args: dict) -> dict:
    answer, _ = await _run_node(api, auth, args, {"label": "compile"})
    code = None
    if answer["ended"]:
        where = {"run_id": answer["run_id"], "unique_id": answer["unique_id"]}
        detail = await api.call(auth, "GET", route_path(NODE, where), query={"limit": 1})
        code = detail["compiled_code"]
    return msgspec.to_builtins(msgspec.convert({**answer, "compiled_code": code}, Compiled))

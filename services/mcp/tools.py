"""The tools: each says which REST routes it calls, and so which role it needs.

Most tools are one route (`_route_tool`): the route's parameters and request body are the
tool's arguments, its answer Struct is the tool's output. `get_model`, `get_model_health`,
`retry_run`, `show` and `compile` read or call several routes. A tool changes nothing unless
it says so (`changes`); those carry MCP's destructive (unless it writes nothing: show,
compile) and non-idempotent hints, and a token whose role cannot call their routes is never
shown them (`allowed`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jetdbt.services.api import auth, openapi, schemas
from jetdbt.services.mcp import model_details, model_health, run_tools
from jetdbt.services.mcp.api_client import Api, route_path
from jetdbt.services.mcp.tool_schemas import object_schema, operation, route_input_schema
from jetdbt.shared.identity import principals
from jetdbt.shared.runs.outcomes import attention

__all__ = ["Tool", "TOOLS", "BY_NAME", "allowed", "needed_role"]

# Route parameters a tool does not take: a followed log is a stream, not an answer.
_NOT_ARGUMENTS = {"follow", "Last-Event-ID"}
Run = Callable[[Api, str, dict], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    routes: tuple[tuple[str, str], ...]  # (method, route) of every call it makes
    input_schema: dict
    output: type  # the Struct its structured answer is
    run: Run
    changes: bool = False
    idempotent: bool = True  # said only of a tool that changes something
    destructive: bool = True  # likewise: False for a run that writes nothing (show, compile)
    op: openapi.Operation | None = None  # the one route it is, when it is one

    @property
    def output_schema(self) -> dict:
        return object_schema(self.output)


def needed_role(tool: Tool) -> str:
    """The highest role among its routes', as the API's own `auth.route_role` decides."""
    roles = [auth.route_role(method, route) for method, route in tool.routes]
    return max(roles, key=principals.ROLES.index)


def allowed(tool: Tool, role: str) -> bool:
    return principals.role_allows(role, needed_role(tool))


def _route_tool(
    name: str,
    title: str,
    method: str,
    route: str,
    description: str,
    *,
    changes: bool = False,
    idempotent: bool = True,
    shape: Callable[[Any], Any] | None = None,
) -> Tool:
    op = operation(method, route)
    params = tuple(p for p in op.params if p.split(":")[0] not in _NOT_ARGUMENTS)
    names = [p.split(":")[0] for p in params]
    in_path = [n for n in names if "{" + n + "}" in route]

    async def run(api: Api, auth: str, args: dict) -> Any:
        body = {k: v for k, v in args.items() if k not in names} if op.request else None
        answer = await api.call(
            auth,
            method,
            route_path(route, {n: args[n] for n in in_path}),
            query={n: args[n] for n in names if n not in in_path and n in args},
            body=body,
        )
        return shape(answer) if shape is not None else answer

    return Tool(
        name=name,
        title=title,
        description=f"{description} ({method} {route})",
        routes=((method, route),),
        input_schema=route_input_schema(op, params),
        output=op.body,
        run=run,
        changes=changes,
        idempotent=idempotent,
        op=op,
    )


def _failures_first(run: dict) -> dict:
    """A run's nodes, failed first, then warned, skipped, ..., passed (the CLI's order)."""
    run["nodes"].sort(key=lambda n: (attention(n["outcome"]), n["unique_id"]))
    return run


async def _model(api: Api, auth: str, args: dict) -> Any:
    return await model_details.model_details(api, auth, args["project"], args["node"])


_RUNS_POST = "/v1/projects/{project}/runs"
_RUN = "/v1/runs/{run_id}"


async def _retry(api: Api, auth: str, args: dict) -> Any:
    run = await api.call(auth, "GET", route_path(_RUN, {"run_id": args["run_id"]}))
    body = {"command": {"label": "retry", "dbt_retry_job": args["run_id"]}}
    return await api.call(
        auth, "POST", route_path(_RUNS_POST, {"project": run["project"]}), body=body
    )


def _arguments(properties: dict, optional: tuple[str, ...] = ()) -> dict:
    """The input schema of a tool that is not one route: these properties, all required but
    the `optional` ones."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


_PROJECT = openapi.parameter("project")["schema"]
_RUN_ID = openapi.parameter("run_id")["schema"]
_NODE = {"type": "string", "minLength": 1, "maxLength": 512,
         "description": "a unique_id (model.jaffle_shop.orders) or a model's name"}  # fmt: skip
_LOOKS = (
    " The node is found in the deployed graph first (a name it lacks is refused, and no run"
    f" starts); the call waits for the run at most {run_tools.WAIT_SECONDS:.0f} s: `ended`"
    " false then, follow `run_id` with get_run."
)

TOOLS: tuple[Tool, ...] = (
    _route_tool("whoami", "Who am I", "GET", "/v1/whoami",
                "The token this session uses: principal, team, role and project pattern."
                " A viewer reads; a runner also starts, retries and cancels runs."),
    _route_tool("list_projects", "List projects", "GET", "/v1/projects",
                "The projects this token may see, each with its deployed version and last run."),
    _route_tool("get_lineage", "A project's lineage", "GET", "/v1/projects/{project}/graph",
                "A project's deployed dbt graph, a page of nodes (models, seeds, snapshots,"
                " sources, tests with their relation, columns, tags, raw SQL) and the edges"
                " into them; `next.after` reads the following page."),
    Tool(
        name="get_model",
        title="One model's details",
        description="One node of a project's deployed graph, by unique_id or model name: its"
        " parents, children, columns, tests, relation, and its rows in the project's latest"
        f" {model_details.RUNS_READ} runs (status, outcome, dbt's message).",
        routes=(("GET", model_details.GRAPH), ("GET", model_details.RUNS),
                ("GET", model_details.RUN)),
        input_schema=_arguments({"project": _PROJECT, "node": _NODE}),
        output=model_details.ModelDetails,
        run=_model,
    ),
    Tool(
        name="get_model_health",
        title="How a model is doing",
        description="One node's health from what jetdbt recorded, starting no run: its outcome"
        f" and duration in its latest {model_health.RUNS_SEEN} runs that built or tested it,"
        " the last outcome of each of its tests (failing_tests: those that failed), the last"
        " freshness check of every source upstream of it, and one word (failing, warning,"
        " healthy, unknown) with the reasons for it.",
        routes=model_health.ROUTES,
        input_schema=_arguments({"project": _PROJECT, "node": _NODE}),
        output=model_health.ModelHealth,
        run=model_health.model_health,
    ),
    Tool(
        name="show",
        title="Preview a model's rows",
        description="A real `dbt show` run of one node of the project (a model, seed or"
        " snapshot; never inline SQL) in its default environment, deferring as a build"
        " would, and its first `limit` rows (at most"
        f" {run_tools.LIMIT_SCHEMA['maximum']}), as dbt printed them." + _LOOKS,
        routes=run_tools.SHOW_ROUTES,
        input_schema=_arguments(
            {"project": _PROJECT, "node": _NODE, "limit": run_tools.LIMIT_SCHEMA}, ("limit",)
        ),
        output=run_tools.Preview,
        run=run_tools.preview,
        changes=True,
        idempotent=False,
        destructive=False,
    ),
    Tool(
        name="compile",
        title="A model's compiled SQL",
        description="A real `dbt compile` run of one node of the project in its default"
        " environment (nothing is built), and the SQL dbt compiled for it." + _LOOKS,
        routes=run_tools.COMPILE_ROUTES,
        input_schema=_arguments({"project": _PROJECT, "node": _NODE}),
        output=run_tools.Compiled,
        run=run_tools.compiled,
        changes=True,
        idempotent=False,
        destructive=False,
    ),
    _route_tool("list_runs", "List a project's runs", "GET", "/v1/projects/{project}/runs",
                "A project's runs, newest first: status, environment, command, who asked, node"
                " counts; `environment` keeps one environment's runs."),
    _route_tool("get_run", "A run and its failures", "GET", "/v1/runs/{run_id}",
                "A run with every node, failures first with dbt's message, then warned,"
                " skipped and passed; live while it runs: poll it until `finished_at` is set.",
                shape=_failures_first),
    _route_tool("get_run_logs", "A run's log lines", "GET", "/v1/runs/{run_id}/logs",
                "A page of a run's log lines (dbt's output, masked), from line `after`;"
                " `next` is set while the run goes or more lines follow."),
    _route_tool("list_deploys", "List a project's deploys", "GET",
                "/v1/projects/{project}/deploys", "A project's deploys, newest first."),
    _route_tool("list_environments", "A project's environments", "GET",
                "/v1/projects/{project}/environments",
                "Each environment's published state, with the run that published it"
                " (what `defer` resolves against)."),
    _route_tool("list_versions", "What each environment runs", "GET",
                "/v1/projects/{project}/versions",
                "Each environment's current version (and each person's own dev environment,"
                " each pull request's check): since when, by whom, and the version before it."),
    _route_tool("list_promotions", "A project's promotions", "GET",
                "/v1/projects/{project}/promotions",
                "Every promotion and rollback, newest first: which environment, from which"
                " version to which, who and when; `environment` filters one."),
    _route_tool("get_retry_state", "What a retry would resume", "GET",
                "/v1/projects/{project}/retry-state",
                "Per principal, the run `retry_run` would resume."),
    _route_tool("get_relation", "A relation's page", "GET", "/v1/relations/{key}",
                "Who writes and who reads one warehouse relation (dbt://<warehouse>/<schema>/"
                "<name>) across projects and declared writes, and the runs that built it."),
    _route_tool("start_run", "Start a run", "POST", _RUNS_POST,
                "Publish a run command and return its run id at once; follow it with get_run."
                " `command` is {label: build, select, exclude, vars, full_refresh, defer},"
                " {label: retry, dbt_retry_job} or {label: parse, vars}. A build writes"
                " the warehouse. `environment` names the project environment it runs in"
                " (default: the project's default; `dev`: the caller's own schema).",
                changes=True, idempotent=False),
    Tool(
        name="retry_run",
        title="Retry a failed run",
        description="Resume a failed run with `dbt retry` (only what failed or was skipped is"
        " rebuilt) as a new run; returns its run id at once. Only the token principal's latest"
        f" run of the project can be resumed. (GET {_RUN}, POST {_RUNS_POST})",
        routes=(("GET", _RUN), ("POST", _RUNS_POST)),
        input_schema=_arguments({"run_id": _RUN_ID}),
        output=schemas.RunAccepted,
        run=_retry,
        changes=True,
        idempotent=False,
    ),
    _route_tool("cancel_run", "Cancel a run", "POST", "/v1/runs/{run_id}/cancel",
                "Cancel a run: a queued one never starts, a running one's dbt is killed.",
                changes=True, idempotent=True),
    _route_tool("list_jobs", "List a project's jobs", "GET", "/v1/projects/{project}/jobs",
                "A project's saved jobs: each one's dbt command with its selection and vars,"
                " its triggers, and its schedule (state, cron, time zone, fires so far, last"
                " and next fire time)."),
    _route_tool("run_job", "Run a saved job now", "POST", "/v1/projects/{project}/jobs/{job}/runs",
                "Run a saved job now, as the log holds it; returns the run id at once, and the"
                " run carries the job's name (follow it with get_run). The job's command may"
                " write the warehouse.",
                changes=True, idempotent=False),
    _route_tool("change_job", "Save, schedule, pause or delete a job", "POST",
                "/v1/projects/{project}/jobs",
                "Publish a job command: `action` save (with `job`: {command, ...} as start_run"
                " takes it), delete, schedule (`cron` with seconds first, `0 0 6 * * *`, or"
                " `@every 30s`; `tz`), pause, resume or unschedule. Accepted at once; a runner"
                " checks it, and list_jobs shows the job as it then is.",
                changes=True, idempotent=False),
)  # fmt: skip

BY_NAME = {tool.name: tool for tool in TOOLS}

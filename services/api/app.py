"""The query API: reads projections, never executes anything.

Commands a caller POSTs here go onto `dbt.cmd.>` exactly as another system
would publish them; everything else is a read of the projection tables. Every
request passes `boundary.guard` first, so a route reads only checked parameters;
every list is a page with a cap, and says how to read the next one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import asyncpg
import msgspec
from aiohttp import web
from jetdbt.projections.progress.tables import (
    COUNT_COLUMNS,
    NODE_COLUMNS,
    NODE_DETAIL_COLUMNS,
    RUN_COLUMNS,
    without_nodes,
)
from jetdbt.services.api import auth, projector_roles, schemas, warehouse_door
from jetdbt.services.api.artifact_routes import add_artifact_routes
from jetdbt.services.api.boundary import check_routes, error, guard, page, path, query, respond
from jetdbt.services.api.cancel_routes import add_cancel_routes
from jetdbt.services.api.deploy_routes import add_deploy_routes
from jetdbt.services.api.event_stream import add_event_stream_routes
from jetdbt.services.api.graph_routes import add_graph_routes
from jetdbt.services.api.hook_routes import add_hook_routes
from jetdbt.services.api.job_routes import add_job_routes
from jetdbt.services.api.keys import BUS, DEAD_TASKS, POOL, SANDBOX, SETTINGS
from jetdbt.services.api.log_routes import add_log_routes
from jetdbt.services.api.node_routes import add_node_routes
from jetdbt.services.api.openapi import add_openapi_routes
from jetdbt.services.api.ops_routes import add_ops_routes
from jetdbt.services.api.overlap_routes import add_overlap_routes
from jetdbt.services.api.project_routes import add_project_routes
from jetdbt.services.api.promotion_routes import add_promotion_routes
from jetdbt.services.api.ui_routes import add_ui_routes
from jetdbt.services.api.whoami_routes import add_whoami_routes
from jetdbt.shared.bus import commands
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.identity import warehouse_grants
from jetdbt.shared.process.config import Settings, load

__all__ = ["create_app", "HEADER_TIMEOUT_SECONDS"]
# How long NATS may be away before the service says it is unhealthy (a restart is quick).
NATS_GRACE_SECONDS = 15.0
# How long a connection may take to send a request's head (and stay idle between
# requests): aiohttp's keep-alive timer runs from the connection's start and is not reset
# by partial data, so a client trickling a header a byte at a time is closed by then.
HEADER_TIMEOUT_SECONDS = 10.0
# How long /healthz waits for JetStream to answer its round trip.
NATS_DEADLINE_SECONDS = 2.0

# A run as listed: its columns without the stored result, with the node counts.
_RUN = ", ".join([c for c in RUN_COLUMNS if c != "result"] + list(COUNT_COLUMNS))
_NODE = ", ".join(c for c in NODE_COLUMNS if c not in ("run_id", *NODE_DETAIL_COLUMNS))


# Rows per page of each list route: (default, maximum).
RUNS_PAGE = (50, 500)
DEPLOYS_PAGE = (100, 500)
RETRY_STATE_PAGE = (100, 1000)
ENVIRONMENTS_PAGE = (100, 1000)


async def healthz(request: web.Request) -> web.Response:
    """503 when NATS has not answered a round trip past a grace period or a service task
    died, so an orchestrator restarts what cannot recover by itself. A projection a fold's
    bug stops is named and makes `ok` false, but answers 200: the API still serves, and no
    restart fixes a fold. Why it stopped is on /v1/projections, behind a token: the reason
    may quote an event's data, and this route is public. `nats` is this
    request's round trip (JetStream answered within NATS_DEADLINE_SECONDS), never the
    connection's state: a stopped server keeps its socket open."""
    async with request.app[POOL].acquire() as conn:
        stopped = await conn.fetch(
            "SELECT projector FROM checkpoints WHERE stopped IS NOT NULL ORDER BY projector"
        )
    bus = request.app[BUS]
    answered = await bus.round_trip(NATS_DEADLINE_SECONDS)
    away = max(bus.unanswered_for(), bus.away_for())
    dead = request.app[DEAD_TASKS]()
    problems = [f"{name} stopped" for name in dead]
    if not answered and away > NATS_GRACE_SECONDS:
        problems.append(f"NATS away for {away:.0f}s: no answer within {NATS_DEADLINE_SECONDS:.0f}s")
    sandbox, refusing = request.app[SANDBOX]()
    if refusing:
        problems.append(f"the runner refuses every project: its sandbox is {sandbox}")
    found = None
    if answered:
        found = await projector_roles.projector_roles(request.app, bus, NATS_DEADLINE_SECONDS)
    body = {
        "ok": not problems and not stopped,
        "nats": answered,
        "problems": problems,
        "stopped": [r["projector"] for r in stopped],
        "sandbox": sandbox,
        "projectors": found,
    }
    return respond(schemas.shaped(schemas.Health, body), 503 if problems else 200)


async def get_run(request: web.Request) -> web.Response:
    run_id = path(request, "run_id")
    async with request.app[POOL].acquire() as conn:
        run = await conn.fetchrow(f"SELECT {_RUN}, result FROM runs WHERE run_id = $1", run_id)
        if run is None:
            return error(404, f"run {run_id!r} not found")
        nodes = await conn.fetch(
            f"SELECT {_NODE} FROM run_nodes WHERE run_id = $1"
            " ORDER BY started_at NULLS LAST, unique_id",
            run_id,
        )
    body = dict(run)
    # The progress fold stores results without their nodes; rows folded before it did
    # still carry them until a `replay --swap`. The nodes are the run_nodes rows either way.
    result = body.pop("result") or {}
    body["result"] = without_nodes(result) or None
    body["nodes"] = [dict(n) for n in nodes]
    return respond(schemas.shaped(schemas.Run, body))


async def _project_page(
    request: web.Request, key: str, sizes: tuple[int, int], sql: str, schema: type, *more
) -> web.Response:
    """One page of a project's rows of a projection, under `key`, and the next page's query.

    `sql` takes the project as $1, `more` as $4 on, and ends in `LIMIT $2 OFFSET $3` after
    an ORDER BY that is total, so pages neither repeat nor skip a row.
    """
    project = path(request, "project")
    want = page(request, *sizes)
    async with request.app[POOL].acquire() as conn:
        fetched = await conn.fetch(sql, project, want.limit + 1, want.offset, *more)
    rows, after = want.rows(fetched)
    body = {"project": project, key: [dict(r) for r in rows], "next": after}
    return respond(schemas.shaped(schema, body))


async def list_runs(request: web.Request) -> web.Response:
    """`?environment=NAME` keeps the runs of one environment, `?job=NAME` those of one job."""
    return await _project_page(
        request,
        "runs",
        RUNS_PAGE,
        f"SELECT {_RUN} FROM runs WHERE project = $1 AND ($4 = '' OR environment = $4)"
        " AND ($5 = '' OR job = $5)"
        " ORDER BY requested_at DESC NULLS LAST, run_id LIMIT $2 OFFSET $3",
        schemas.Runs,
        query(request, "environment", ""),
        query(request, "job", ""),
    )


async def list_deploys(request: web.Request) -> web.Response:
    return await _project_page(
        request,
        "deploys",
        DEPLOYS_PAGE,
        "SELECT deploy_id, status, version, manifest_digest, engine, engine_version, adapter,"
        " adapter_version, skipped, reason, requested_by, team, door, source, at FROM deploys"
        " WHERE project = $1 ORDER BY at DESC, deploy_id LIMIT $2 OFFSET $3",
        schemas.Deploys,
    )


async def retry_state(request: web.Request) -> web.Response:
    """Per principal, which run a retry would resume."""
    return await _project_page(
        request,
        "retry_state",
        RETRY_STATE_PAGE,
        "SELECT principal, run_id, attempt, version, command, args, saved_at"
        " FROM retry_state WHERE project = $1 ORDER BY principal LIMIT $2 OFFSET $3",
        schemas.RetryStates,
    )


async def environments(request: web.Request) -> web.Response:
    """Each environment's published state: which run published it, and when."""
    return await _project_page(
        request,
        "environments",
        ENVIRONMENTS_PAGE,
        "SELECT warehouse, target, schema_name AS schema, database_name AS database, run_id,"
        " version, manifest_digest, run_results_digest IS NOT NULL AS has_run_results,"
        " published_at FROM environments WHERE project = $1"
        " ORDER BY warehouse, target, environment_key LIMIT $2 OFFSET $3",
        schemas.Environments,
    )


async def post_run(request: web.Request) -> web.Response:
    """Publish a run command as the token's principal; 202 with the run id to follow."""
    project = path(request, "project")
    try:
        body = commands.decode_run(await request.read())
    except commands.CommandRejected as exc:
        return error(400, str(exc))
    refused = await warehouse_door.refusal(request, project)
    if refused is not None:
        return refused
    token = auth.token_of(request)
    run_id = body.run_id or uuid.uuid4().hex
    cmd = msgspec.structs.replace(body, run_id=run_id, requested_by=token.principal)
    await request.app[BUS].publish_command(
        "run", project, cmd, run_id, principal=token.principal, token_id=token.id
    )
    return respond(schemas.RunAccepted(run_id=run_id, project=project), status=202)


def create_app(
    pool: asyncpg.Pool,
    bus: Bus,
    dead_tasks: Callable[[], list[str]] = list,
    sandbox: Callable[[], tuple[str | None, bool]] = lambda: (None, False),
    grants: dict[str, list[str] | None] | None = None,
    settings: Settings | None = None,
) -> web.Application:
    """`dead_tasks` names the service tasks of this process that stopped on their own;
    `sandbox` is this process's runner's sandbox, as described, and whether it refuses runs;
    `grants` the teams of each warehouse (jetdbt.shared.identity.warehouse_grants.load; None: the
    embedded
    default's); `settings` the stack's (None: read from the environment)."""
    settings = settings or load()
    app = web.Application(middlewares=[auth.authenticate, guard, auth.authorize])
    auth.install(app, pool, bus)
    warehouse_door.install(app, bus, warehouse_grants.load(None) if grants is None else grants)
    app[POOL] = pool
    app[BUS] = bus
    app[DEAD_TASKS] = dead_tasks
    app[SANDBOX] = sandbox
    app[SETTINGS] = settings
    projector_roles.install(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/v1/runs/{run_id}", get_run)
    app.router.add_get("/v1/projects/{project}/runs", list_runs)
    app.router.add_post("/v1/projects/{project}/runs", post_run)
    app.router.add_get("/v1/projects/{project}/retry-state", retry_state)
    app.router.add_get("/v1/projects/{project}/environments", environments)
    app.router.add_get("/v1/projects/{project}/deploys", list_deploys)
    add_graph_routes(app, pool)
    add_overlap_routes(app, pool)
    add_node_routes(app, pool)
    add_artifact_routes(app, pool, bus)
    add_ops_routes(app, pool, bus)
    add_cancel_routes(app, pool, bus)
    add_job_routes(app, pool, bus, least=settings.schedule_min_interval_seconds)
    add_hook_routes(app, pool, bus)
    add_log_routes(app, bus)
    add_event_stream_routes(app, bus)
    add_project_routes(app, pool)
    add_promotion_routes(app, pool, bus)
    add_deploy_routes(app, bus)
    add_whoami_routes(app)
    add_ui_routes(app)
    add_openapi_routes(app)
    check_routes(app)
    return app

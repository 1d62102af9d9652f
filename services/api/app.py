"""The query API: reads projections, never executes anything.

Commands a caller POSTs here go onto `dbt.cmd.>` exactly as another system
would publish them; everything else is a read of the projection tables. Every
request passes `boundary.guard` first, so a route reads only checked parameters;
every list is a page with a cap, and says how to read the next one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
from aiohttp import web
from jetdbt.services.api import (
    artifact_routes,
    auth,
    cancel_routes,
    deploy_routes,
    event_stream,
    graph_routes,
    health_routes,
    hook_routes,
    job_routes,
    log_routes,
    node_routes,
    openapi,
    ops_routes,
    overlap_routes,
    project_routes,
    projector_roles,
    promotion_routes,
    run_routes,
    state_routes,
    ui_routes,
    warehouse_door,
    whoami_routes,
)
from jetdbt.services.api.boundary import check_routes, guard
from jetdbt.services.api.keys import BUS, DEAD_TASKS, POOL, SANDBOX, SETTINGS, UI_DIST
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.identity import warehouse_grants
from jetdbt.shared.process.config import Settings, load

__all__ = ["create_app", "HEADER_TIMEOUT_SECONDS"]
# How long a connection may take to send a request's head (and stay idle between
# requests): aiohttp's keep-alive timer runs from the connection's start and is not reset
# by partial data, so a client trickling a header a byte at a time is closed by then.
HEADER_TIMEOUT_SECONDS = 10.0


def create_app(
    settings: Settings | None = None,
    *,
    open_pool: Callable[[], Awaitable[asyncpg.Pool]] | None = None,
    open_bus: Callable[[], Awaitable[Bus]] | None = None,
    dead_tasks: Callable[[], list[str]] = list,
    sandbox: Callable[[], tuple[str | None, bool]] = lambda: (None, False),
    grants: dict[str, list[str] | None] | None = None,
) -> web.Application:
    """The app, its pool and NATS connection opened as it starts and closed as it stops (its
    cleanup context), each by its opener; one given no openers only lists its routes (the
    OpenAPI document) and is never started. `settings` are the stack's (None: read from the
    environment); `dead_tasks` names the service tasks of this process that stopped on their
    own; `sandbox` is this process's runner's sandbox, as described, and whether it refuses
    runs; `grants` the teams of each warehouse (shared.identity.warehouse_grants.load; None:
    the embedded default's)."""
    if (open_pool is None) != (open_bus is None):
        raise ValueError("create_app takes both openers (an app that serves) or neither")
    settings = settings or load()
    app = web.Application(middlewares=[auth.authenticate, guard, auth.authorize])
    warehouse_door.install(app, warehouse_grants.load(None) if grants is None else grants)
    if open_pool is not None and open_bus is not None:
        app.cleanup_ctx.append(_connections(open_pool, open_bus))
    app[DEAD_TASKS] = dead_tasks
    app[SANDBOX] = sandbox
    app[SETTINGS] = settings
    projector_roles.install(app)
    app.add_routes(health_routes.routes)
    app.add_routes(run_routes.routes)
    app.add_routes(state_routes.routes)
    app.add_routes(graph_routes.routes)
    app.add_routes(overlap_routes.routes)
    app.add_routes(node_routes.routes)
    app.add_routes(artifact_routes.routes)
    app.add_routes(ops_routes.routes)
    app.add_routes(cancel_routes.routes)
    app.add_routes(job_routes.routes)
    app.add_routes(hook_routes.routes)
    app.add_routes(log_routes.routes)
    app.add_routes(event_stream.routes)
    app.add_routes(project_routes.routes)
    app.add_routes(promotion_routes.routes)
    app.add_routes(deploy_routes.routes)
    app.add_routes(whoami_routes.routes)
    app[UI_DIST] = ui_routes.DIST
    app.add_routes(ui_routes.routes)
    app.add_routes(openapi.routes)
    check_routes(app)
    return app


def _connections(
    open_pool: Callable[[], Awaitable[asyncpg.Pool]], open_bus: Callable[[], Awaitable[Bus]]
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Open the pool and the NATS connection for the app's life, and close both after it."""

    async def held(app: web.Application) -> AsyncIterator[None]:
        app[POOL] = await open_pool()
        try:
            app[BUS] = await open_bus()
            try:
                yield
            finally:
                await app[BUS].close()
        finally:
            await app[POOL].close()

    return held

"""`GET /healthz`: whether this process should be restarted, for an orchestrator's probe.

Public (no token): it says what is wrong, never why a projection stopped, which may quote an
event's data.
"""

from __future__ import annotations

from aiohttp import web
from jetdbt.projections.upkeep import queries
from jetdbt.services.api import projector_roles, schemas
from jetdbt.services.api.boundary import respond
from jetdbt.services.api.keys import BUS, DEAD_TASKS, POOL, SANDBOX

__all__ = ["routes", "NATS_GRACE_SECONDS", "NATS_DEADLINE_SECONDS"]

# How long NATS may be away before the service says it is unhealthy (a restart is quick).
NATS_GRACE_SECONDS = 15.0
# How long /healthz waits for JetStream to answer its round trip.
NATS_DEADLINE_SECONDS = 2.0

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """503 when NATS has not answered a round trip past a grace period or a service task
    died, so an orchestrator restarts what cannot recover by itself. A projection a fold's
    bug stops is named and makes `ok` false, but answers 200: the API still serves, and no
    restart fixes a fold. Why it stopped is on /v1/projections, behind a token: the reason
    may quote an event's data, and this route is public. `nats` is this
    request's round trip (JetStream answered within NATS_DEADLINE_SECONDS), never the
    connection's state: a stopped server keeps its socket open."""
    async with request.app[POOL].acquire() as conn:
        stopped = await queries.stopped_projections(conn)
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
        "stopped": stopped,
        "sandbox": sandbox,
        "projectors": found,
    }
    return respond(schemas.shaped(schemas.Health, body), 503 if problems else 200)

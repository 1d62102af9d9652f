"""POST /v1/runs/{run_id}/cancel: publish a cancel of a run, as the token's principal.

The API executes nothing: the cancel goes onto `dbt.cmd.cancel.<project>.<principal>`
like any other command. The runner holding the run kills its dbt; a run still waiting
never starts; one not delivered yet reads the recorded cancel before it could start.
"""

from __future__ import annotations

from aiohttp import web
from jetdbt.projections.progress import queries
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, respond
from jetdbt.services.api.keys import BUS, POOL
from jetdbt.shared.bus.commands import CancelCommand

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.post("/v1/runs/{run_id}/cancel")
async def cancel_run(request: web.Request) -> web.Response:
    """202 once the cancel is published; 404 for an unknown run, 409 for one that ended."""
    run_id = path(request, "run_id")
    run = await queries.run_summary(request.app[POOL], run_id)
    if run is None:
        return error(404, f"run {run_id!r} not found")
    if run.finished_at is not None:
        return error(409, f"run {run_id!r} has ended ({run.status}): nothing to cancel")
    token = auth.token_of(request)
    await request.app[BUS].publish_command(
        "cancel",
        run.project,
        CancelCommand(run_id=run_id, requested_by=token.principal),
        run_id,
        principal=token.principal,
        token_id=token.id,
    )
    return respond(schemas.RunAccepted(run_id=run_id, project=run.project), status=202)

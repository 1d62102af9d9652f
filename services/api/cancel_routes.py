"""POST /v1/runs/{run_id}/cancel: publish a cancel of a run, as the token's principal.

The API executes nothing: the cancel goes onto `dbt.cmd.cancel.<project>.<principal>`
like any other command. The runner holding the run kills its dbt; a run still waiting
never starts; one not delivered yet reads the recorded cancel before it could start.
"""

from __future__ import annotations

import asyncpg
from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, respond
from jetdbt.shared.bus.commands import CancelCommand
from jetdbt.shared.bus.connection import Bus

__all__ = ["add_cancel_routes"]


def add_cancel_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus) -> None:
    async def cancel_run(request: web.Request) -> web.Response:
        """202 once the cancel is published; 404 for an unknown run, 409 for one that ended."""
        run_id = path(request, "run_id")
        async with pool.acquire() as conn:
            run = await conn.fetchrow(
                "SELECT project, status, finished_at FROM runs WHERE run_id = $1", run_id
            )
        if run is None:
            return error(404, f"run {run_id!r} not found")
        if run["finished_at"] is not None:
            return error(409, f"run {run_id!r} has ended ({run['status']}): nothing to cancel")
        token = auth.token_of(request)
        await bus.publish_command(
            "cancel",
            run["project"],
            CancelCommand(run_id=run_id, requested_by=token.principal),
            run_id,
            principal=token.principal,
            token_id=token.id,
        )
        return respond(schemas.RunAccepted(run_id=run_id, project=run["project"]), status=202)

    app.router.add_post("/v1/runs/{run_id}/cancel", cancel_run)

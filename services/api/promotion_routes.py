"""What each environment of a project runs, its promotions, and the promote command.

A promotion is a command like any other: it goes onto `dbt.cmd.promote.<project>.<principal>`
as the token's principal (a deployer's), and a runner checks it again and publishes the
Promoted event (or a refusal) that the promotions projection folds into what GET answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web
from jetdbt.projections.answers import Database
from jetdbt.projections.promotions import queries
from jetdbt.projections.promotions.answers import SlotVersion
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.keys import BUS
from jetdbt.services.api.pages import Read, project_page
from jetdbt.shared.bus import commands

__all__ = ["routes", "VERSIONS_PAGE", "PROMOTIONS_PAGE"]

VERSIONS_PAGE = (100, 1000)
PROMOTIONS_PAGE = (50, 500)

routes = web.RouteTableDef()

# A query of slot rows: the project, the environment (None: every one), limit, offset.
_SlotRead = Callable[[Database, str, str | None, int, int], Awaitable[list[SlotVersion]]]


def _of_environment(request: web.Request, read: _SlotRead) -> Read:
    """`read` of the environment ?environment= names (none: every one)."""
    environment = query(request, "environment")

    def of_it(db: Database, project: str, limit: int, offset: int):
        return read(db, project, environment, limit, offset)

    return of_it


@routes.get("/v1/projects/{project}/versions")
async def versions(request: web.Request) -> web.Response:
    read = _of_environment(request, queries.versions)
    return await project_page(request, "versions", VERSIONS_PAGE, read, schemas.Versions)


@routes.get("/v1/projects/{project}/promotions")
async def promotions(request: web.Request) -> web.Response:
    read = _of_environment(request, queries.promotions)
    return await project_page(request, "promotions", PROMOTIONS_PAGE, read, schemas.Promotions)


@routes.post("/v1/projects/{project}/promotions")
async def post_promotion(request: web.Request) -> web.Response:
    project = path(request, "project")
    try:
        body = commands.decode_promote(await request.read())
    except commands.CommandRejected as exc:
        return error(400, str(exc))
    token = auth.token_of(request)
    cmd = msgspec.structs.replace(body, requested_by=token.principal)
    ack = await request.app[BUS].publish_command(
        "promote", project, cmd, uuid.uuid4().hex, principal=token.principal, token_id=token.id
    )
    accepted = schemas.PromotionAccepted(
        project=project,
        environment=cmd.environment,
        version=cmd.version,
        command_id=f"c{ack.seq}",
    )
    return respond(accepted, status=202)

"""What each environment of a project runs, its promotions, and the promote command.

A promotion is a command like any other: it goes onto `dbt.cmd.promote.<project>.<principal>`
as the token's principal (a deployer's), and a runner checks it again and publishes the
Promoted event (or a refusal) that the promotions projection folds into what GET answers.
"""

from __future__ import annotations

import uuid

import asyncpg
import msgspec
from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, page, path, query, respond
from jetdbt.shared.bus import commands
from jetdbt.shared.bus.connection import Bus

__all__ = ["add_promotion_routes", "VERSIONS_PAGE", "PROMOTIONS_PAGE"]

VERSIONS_PAGE = (100, 1000)
PROMOTIONS_PAGE = (50, 500)
_SLOT = "slot, environment, principal, pr, version, previous, deploy_id, promoted_by, promoted_at"


def add_promotion_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus) -> None:
    async def _page(request: web.Request, key: str, sizes, table: str, order: str, schema):
        """A page of `table`'s rows of the project (of one environment with ?environment=)."""
        project = path(request, "project")
        environment = query(request, "environment")
        want = page(request, *sizes)
        async with pool.acquire() as conn:
            fetched = await conn.fetch(
                f"SELECT {_SLOT} FROM {table} WHERE project = $1"
                " AND ($2::text IS NULL OR environment = $2)"
                f" ORDER BY {order} LIMIT $3 OFFSET $4",
                project,
                environment,
                want.limit + 1,
                want.offset,
            )
        rows, after = want.rows(fetched)
        body = {"project": project, key: [dict(r) for r in rows], "next": after}
        return respond(schemas.shaped(schema, body))

    async def versions(request: web.Request) -> web.Response:
        return await _page(
            request,
            "versions",
            VERSIONS_PAGE,
            "environment_versions",
            "pr, environment, principal",
            schemas.Versions,
        )

    async def promotions(request: web.Request) -> web.Response:
        return await _page(
            request,
            "promotions",
            PROMOTIONS_PAGE,
            "promotions",
            "stream_seq DESC",
            schemas.Promotions,
        )

    async def post_promotion(request: web.Request) -> web.Response:
        project = path(request, "project")
        try:
            body = commands.decode_promote(await request.read())
        except commands.CommandRejected as exc:
            return error(400, str(exc))
        token = auth.token_of(request)
        cmd = msgspec.structs.replace(body, requested_by=token.principal)
        ack = await bus.publish_command(
            "promote", project, cmd, uuid.uuid4().hex, principal=token.principal, token_id=token.id
        )
        accepted = schemas.PromotionAccepted(
            project=project,
            environment=cmd.environment,
            version=cmd.version,
            command_id=f"c{ack.seq}",
        )
        return respond(accepted, status=202)

    app.router.add_get("/v1/projects/{project}/versions", versions)
    app.router.add_get("/v1/projects/{project}/promotions", promotions)
    app.router.add_post("/v1/projects/{project}/promotions", post_promotion)

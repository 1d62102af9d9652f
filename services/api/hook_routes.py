"""Webhooks: list a project's hooks and their deliveries; add and remove hooks.

Adding or removing is a request to the notifier (subjects.hook_control), not a stored
command: an add carries the hook's secret, which the notifier keeps in its own bucket and
this route shows once, in the answer to the add. The token's role on the project was
checked by auth (POST: runner); the principal the notifier records is the token's, never
the body's. Lists come from the hooks projection, which never holds a secret.
"""

from __future__ import annotations

import asyncpg
import msgspec
from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, page, path, query, respond
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.jobs import hook_reasons, webhooks
from jetdbt.shared.jobs.hook_control import NotifierAway, ask_notifier

__all__ = ["add_hook_routes", "HOOKS_PAGE"]

HOOKS_PAGE = (100, 500)


def add_hook_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus) -> None:
    async def list_hooks(request: web.Request) -> web.Response:
        project = path(request, "project")
        want = page(request, *HOOKS_PAGE)
        async with pool.acquire() as conn:
            fetched = await conn.fetch(
                "SELECT name, url, events AS on, job, saved_by, saved_at FROM hooks"
                " WHERE project = $1 ORDER BY name LIMIT $2 OFFSET $3",
                project,
                want.limit + 1,
                want.offset,
            )
        rows, after = want.rows(fetched)
        body = {"project": project, "hooks": [dict(r) for r in rows], "next": after}
        return respond(schemas.shaped(schemas.Hooks, body))

    async def post_hook(request: web.Request) -> web.Response:
        project = path(request, "project")
        try:
            asked = msgspec.json.decode(await request.read(), type=webhooks.HookRequest)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return error(400, str(exc))
        asked = msgspec.structs.replace(asked, principal=auth.token_of(request).principal)
        try:
            reply = await ask_notifier(bus, project, asked)
        except NotifierAway as exc:
            return error(503, str(exc))
        if reply.error:
            return error(404 if "has no hook" in reply.error else 400, reply.error)
        status = 201 if asked.action == "add" else 200
        return respond(schemas.shaped(schemas.HookAnswer, reply), status=status)

    async def list_deliveries(request: web.Request) -> web.Response:
        project, hook = path(request, "project"), path(request, "hook")
        want = page(request, *HOOKS_PAGE)
        state = query(request, "state")
        async with pool.acquire() as conn:
            fetched = await conn.fetch(
                "SELECT delivery_id, attempt, run_id, event, status, state, error, at"
                " FROM hook_deliveries WHERE project = $1 AND hook = $2"
                " AND ($3::text IS NULL OR state = $3) ORDER BY stream_seq DESC"
                " LIMIT $4 OFFSET $5",
                project,
                hook,
                state,
                want.limit + 1,
                want.offset,
            )
        rows, after = want.rows(fetched)
        # An attempt recorded before the vocabulary may quote a receiver's bytes.
        deliveries = [{**r, "error": hook_reasons.served(r["error"], r["status"])} for r in rows]
        body = {"project": project, "hook": hook, "deliveries": deliveries, "next": after}
        return respond(schemas.shaped(schemas.HookDeliveries, body))

    app.router.add_get("/v1/projects/{project}/hooks", list_hooks)
    app.router.add_post("/v1/projects/{project}/hooks", post_hook)
    app.router.add_get("/v1/projects/{project}/hooks/{hook}/deliveries", list_deliveries)

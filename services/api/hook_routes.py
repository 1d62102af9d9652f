"""Webhooks: list a project's hooks and their deliveries; add and remove hooks.

Adding or removing is a request to the notifier (subjects.hook_control), not a stored
command: an add carries the hook's secret, which the notifier keeps in its own bucket and
this route shows once, in the answer to the add. The token's role on the project was
checked by auth (POST: runner); the principal the notifier records is the token's, never
the body's. Lists come from the hooks projection, which never holds a secret.
"""

from __future__ import annotations

import msgspec
from aiohttp import web
from jetdbt.projections.hooks import queries
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, page, path, query, respond
from jetdbt.services.api.keys import BUS, POOL
from jetdbt.services.api.pages import project_page
from jetdbt.shared.jobs import webhooks
from jetdbt.shared.jobs.hook_control import NotifierAway, ask_notifier

__all__ = ["routes", "HOOKS_PAGE"]

HOOKS_PAGE = (100, 500)

routes = web.RouteTableDef()


@routes.get("/v1/projects/{project}/hooks")
async def list_hooks(request: web.Request) -> web.Response:
    return await project_page(request, "hooks", HOOKS_PAGE, queries.hooks, schemas.Hooks)


@routes.post("/v1/projects/{project}/hooks")
async def post_hook(request: web.Request) -> web.Response:
    project = path(request, "project")
    try:
        asked = msgspec.json.decode(await request.read(), type=webhooks.HookRequest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return error(400, str(exc))
    asked = msgspec.structs.replace(asked, principal=auth.token_of(request).principal)
    try:
        reply = await ask_notifier(request.app[BUS], project, asked)
    except NotifierAway as exc:
        return error(503, str(exc))
    if reply.error:
        return error(404 if "has no hook" in reply.error else 400, reply.error)
    status = 201 if asked.action == "add" else 200
    return respond(schemas.shaped(schemas.HookAnswer, reply), status=status)


@routes.get("/v1/projects/{project}/hooks/{hook}/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    project, hook = path(request, "project"), path(request, "hook")
    want = page(request, *HOOKS_PAGE)
    fetched = await queries.deliveries(
        request.app[POOL], project, hook, query(request, "state"), want.limit + 1, want.offset
    )
    rows, after = want.rows(fetched)
    body = {"project": project, "hook": hook, "deliveries": rows, "next": after}
    return respond(schemas.shaped(schemas.HookDeliveries, body))

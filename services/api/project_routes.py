"""`GET /v1/projects`: every project a token may see, with the version it runs and last run.

A project is a name a deploy was accepted under (one not refused): a refused deploy or a
run of a misspelled name leaves nothing in the list. Its last run is a run of what it
deployed: a `jetdbt parse` of a folder (a bundle never deployed) is not. Its last deploy (one not
refused) is given with its status and reason, so a project whose deploys all failed reads as
failed and why, never as an empty row. An admin token sees them
all; any other sees the projects of its team (the team of a project's latest deploy
that names one, as `auth.scope_problem` reads it) whose names match its pattern, so the
list never names another team's project.
"""

from __future__ import annotations

from aiohttp import web
from jetdbt.projections.progress import queries
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import page, respond
from jetdbt.services.api.keys import POOL
from jetdbt.shared.identity import principals

__all__ = ["routes", "PROJECTS_PAGE"]

PROJECTS_PAGE = (100, 500)  # rows per page: default, maximum

routes = web.RouteTableDef()


@routes.get("/v1/projects")
async def list_projects(request: web.Request) -> web.Response:
    token = auth.token_of(request)
    team = None if token.role == "admin" else token.team
    want = page(request, *PROJECTS_PAGE)
    fetched = await queries.projects(request.app[POOL], team, want.limit + 1, want.offset)
    rows, after = want.rows(fetched)
    shown = [r for r in rows if principals.project_matches(token.project, r.project)]
    return respond(schemas.shaped(schemas.Projects, {"projects": shown, "next": after}))

"""Relations a project shares with other projects: what its latest deployed version writes
that another project's latest version writes too. Keys name the warehouse, so two projects
meet only on one warehouse; a deploy (and a promotion) says so instead of overwriting in
silence (`jetdbt deploy` prints it)."""

from __future__ import annotations

import msgspec
from aiohttp import web
from jetdbt.projections.graph import queries
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.keys import POOL

__all__ = ["routes", "RELATIONS_SHOWN"]

routes = web.RouteTableDef()

RELATIONS_SHOWN = 5  # the first relations named per other project; `count` says how many


@routes.get("/v1/projects/{project}/overlaps")
async def overlaps(request: web.Request) -> web.Response:
    """`?version=` one deployed version's (one a promotion is about to make current)."""
    project, asked = path(request, "project"), query(request, "version", "")
    db = request.app[POOL]
    mine = await queries.deployed_graph(db, project, asked)
    version = None if mine is None else mine.version
    if asked and version is None:
        return error(
            404, f"project {project!r} has no graph of version {asked} (not deployed,"
            " not folded yet, or pruned)",
        )  # fmt: skip
    token = auth.token_of(request)
    # Another project is named only when the token may read it.
    shown = [
        o
        if await auth.scope_problem(db, token, o.project) is None
        else msgspec.structs.replace(o, project=None)
        for o in await queries.overlaps(db, project, asked, RELATIONS_SHOWN)
    ]
    return respond(schemas.Overlaps(project=project, version=version, overlaps=shown))

"""Relations a project shares with other projects: what its latest deployed version writes
that another project's latest version writes too. Keys name the warehouse, so two projects
meet only on one warehouse; a deploy (and a promotion) says so instead of overwriting in
silence (`jetdbt deploy` prints it)."""

from __future__ import annotations

import asyncpg
from aiohttp import web
from jetdbt.projections.graph.layers import PRODUCING
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.graph_routes import LATEST_GRAPHS
from jetdbt.shared.runs.graph import SCOPE_VERSION

__all__ = ["add_overlap_routes", "RELATIONS_SHOWN"]

RELATIONS_SHOWN = 5  # the first relations named per other project; `count` says how many

# $1 the project, $2 SCOPE_VERSION, $3 a version of it ("": its current one, as `latest`).
_MINE = (
    "SELECT * FROM latest WHERE project = $1 AND $3 = '' UNION ALL"
    " (SELECT project, version, run_id FROM graph_versions WHERE project = $1 AND scope = $2"
    " AND version = $3 ORDER BY stream_seq DESC LIMIT 1)"
)
# And $4 the producing resource types: the other projects' latest graphs against `mine`.
_OVERLAPS = (
    f"{LATEST_GRAPHS}, mine AS ({_MINE}),"
    " graphs AS (SELECT * FROM latest WHERE project <> $1 UNION ALL SELECT * FROM mine),"
    " written AS (SELECT n.project, n.relation FROM graph_nodes n"
    " JOIN graphs g USING (project, version, run_id)"
    " WHERE n.owned AND n.relation IS NOT NULL AND n.resource_type = ANY($4::text[]))"
    " SELECT o.project, array_agg(DISTINCT o.relation ORDER BY o.relation) AS relations"
    " FROM written o JOIN written m ON m.relation = o.relation AND m.project = $1"
    " WHERE o.project <> $1 GROUP BY o.project ORDER BY o.project"
)


async def _shown(conn, token, rows) -> list[dict]:
    """Each other project's overlap, named only when the token may read that project."""
    return [
        {
            "project": r["project"]
            if await auth.scope_problem(conn, token, r["project"]) is None
            else None,
            "relations": r["relations"][:RELATIONS_SHOWN],
            "count": len(r["relations"]),
        }
        for r in rows
    ]


def add_overlap_routes(app: web.Application, pool: asyncpg.Pool) -> None:
    async def overlaps(request: web.Request) -> web.Response:
        """`?version=` one deployed version's (one a promotion is about to make current)."""
        project, asked = path(request, "project"), query(request, "version", "")
        args = (project, SCOPE_VERSION, asked)
        async with pool.acquire() as conn:
            version = await conn.fetchval(f"{LATEST_GRAPHS} SELECT version FROM ({_MINE}) m", *args)
            rows = await conn.fetch(_OVERLAPS, *args, sorted(PRODUCING))
            shown = await _shown(conn, auth.token_of(request), rows)
        if asked and version is None:
            return error(
                404, f"project {project!r} has no graph of version {asked} (not deployed,"
                " not folded yet, or pruned)",
            )  # fmt: skip
        body = {"project": project, "version": version, "overlaps": shown}
        return respond(schemas.shaped(schemas.Overlaps, body))

    app.router.add_get("/v1/projects/{project}/overlaps", overlaps)

"""`GET /v1/projects`: every project a token may see, with the version it runs and last run.

A project is a name a deploy was accepted under (one not refused): a refused deploy or a
run of a misspelled name leaves nothing in the list. Its last run is a run of what it
deployed: a `jetdbt parse` of a folder (a bundle never deployed) is not. Its last deploy (one not
refused) is given with its status and reason, so a project whose deploys all failed reads as
failed and why, never as an empty row. An admin token sees them
all; any other sees the projects of its team (the team of a project's latest deploy
that names one, as `auth.project_team` decides) whose names match its pattern, so the
list never names another team's project.
"""

from __future__ import annotations

import asyncpg
from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import page, respond
from jetdbt.shared.identity import principals
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT

__all__ = ["add_project_routes", "PROJECTS_PAGE"]

PROJECTS_PAGE = (100, 500)  # rows per page: default, maximum

_SQL = """
SELECT p.project, COALESCE(v.version, d.version) AS version, d.at AS deployed_at,
       r.run_id AS last_run_id,
       r.status AS last_run_status, r.finished_at AS last_run_finished_at,
       l.deploy_id AS last_deploy_id, l.status AS last_deploy_status,
       l.reason AS last_deploy_reason, l.at AS last_deploy_at
FROM (SELECT DISTINCT project FROM deploys WHERE status <> 'refused') p
LEFT JOIN LATERAL (SELECT version, at FROM deploys WHERE project = p.project
                   AND status IN ('deployed', 'unchanged') ORDER BY at DESC LIMIT 1) d ON true
LEFT JOIN LATERAL (SELECT deploy_id, status, reason, at FROM deploys WHERE project = p.project
                   AND status <> 'refused' ORDER BY at DESC, deploy_id LIMIT 1) l ON true
LEFT JOIN environment_versions v ON v.project = p.project AND v.slot = $4
LEFT JOIN LATERAL (SELECT run_id, status, finished_at FROM runs WHERE project = p.project
                   AND NOT hidden AND command->>'bundle_digest' IS NULL
                   ORDER BY requested_at DESC NULLS LAST, run_id LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT team FROM deploys WHERE project = p.project AND team <> ''
                   ORDER BY at DESC LIMIT 1) t ON true
WHERE $1::text IS NULL OR t.team = $1
ORDER BY p.project LIMIT $2 OFFSET $3
"""


def add_project_routes(app: web.Application, pool: asyncpg.Pool) -> None:
    async def list_projects(request: web.Request) -> web.Response:
        token = auth.token_of(request)
        team = None if token.role == "admin" else token.team
        want = page(request, *PROJECTS_PAGE)
        async with pool.acquire() as conn:
            fetched = await conn.fetch(_SQL, team, want.limit + 1, want.offset, DEFAULT_ENVIRONMENT)
        rows, after = want.rows(fetched)
        shown = [dict(r) for r in rows if principals.project_matches(token.project, r["project"])]
        body = {"projects": shown, "next": after}
        return respond(schemas.shaped(schemas.Projects, body))

    app.router.add_get("/v1/projects", list_projects)

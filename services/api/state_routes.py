"""A project's state as its projections have it, a page at a time: its deploys, per principal
the run a retry would resume, and its published environments."""

from __future__ import annotations

from aiohttp import web
from jetdbt.projections.deploys import queries as deploys
from jetdbt.projections.environments import queries as environments
from jetdbt.projections.retry import queries as retry
from jetdbt.services.api import schemas
from jetdbt.services.api.pages import project_page

__all__ = ["routes", "DEPLOYS_PAGE", "RETRY_STATE_PAGE", "ENVIRONMENTS_PAGE"]

# Rows per page of each list: (default, maximum).
DEPLOYS_PAGE = (100, 500)
RETRY_STATE_PAGE = (100, 1000)
ENVIRONMENTS_PAGE = (100, 1000)

routes = web.RouteTableDef()


@routes.get("/v1/projects/{project}/deploys")
async def list_deploys(request: web.Request) -> web.Response:
    return await project_page(request, "deploys", DEPLOYS_PAGE, deploys.deploys, schemas.Deploys)


@routes.get("/v1/projects/{project}/retry-state")
async def retry_state(request: web.Request) -> web.Response:
    """Per principal, which run a retry would resume."""
    return await project_page(
        request, "retry_state", RETRY_STATE_PAGE, retry.retry_states, schemas.RetryStates
    )


@routes.get("/v1/projects/{project}/environments")
async def list_environments(request: web.Request) -> web.Response:
    """Each environment's published state: which run published it, and when."""
    return await project_page(
        request,
        "environments",
        ENVIRONMENTS_PAGE,
        environments.environments,
        schemas.Environments,
    )

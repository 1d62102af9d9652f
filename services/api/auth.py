"""Who may call which route: bearer tokens on every route but /healthz, roles, team scope.

Two middlewares around `boundary.guard`: `authenticate` (outermost) turns the
`Authorization: Bearer jdbt_...` header into the token it names, checked on every
request (revoked and expired tokens are refused at once), or answers 401; `authorize`
(inside guard, so it reads checked path parameters) answers 403 unless the token's role
is at least the route's and, for a route about one project or one run, the project is
the token's: its pattern matches and the project's team (the team on its latest deploy)
is the token's team. Admin tokens see every project.

A relation is about the projects that write or read it: its route checks that the token
may read one of them (`scope_problem`), as it learns them.

A route's role is decided here only: `ROUTE_ROLES` by method and route, else
`METHOD_ROLES` by method. A new route needs nothing when its method's role fits (GET
viewer, POST runner); otherwise it adds one line to ROUTE_ROLES.
"""

from __future__ import annotations

import msgspec
from aiohttp import hdrs, web
from jetdbt.projections.answers import Database
from jetdbt.projections.deploys.queries import project_team
from jetdbt.projections.progress.queries import run_project
from jetdbt.services.api.boundary import error, path
from jetdbt.services.api.keys import BUS, POOL
from jetdbt.services.api.ui_routes import UI_PATHS
from jetdbt.shared.bus import commands
from jetdbt.shared.identity import principals

__all__ = [
    "METHOD_ROLES",
    "PUBLIC",
    "ROUTE_ROLES",
    "UPLOAD",
    "authenticate",
    "authorize",
    "project_problem",
    "route_role",
    "scope_problem",
    "token_of",
]

# The viewer's files and the API's contract hold no data: a browser loads them before it
# has a token (the viewer then sends one with every data call).
PUBLIC = frozenset({"/healthz", "/openapi.json", "/docs", *UI_PATHS})
# A deploy's upload: its body is a bundle, read by its route alone (bounded) and claiming no
# principal; and it may name a project no team holds yet, which its first deploy gives the
# deployer's team (the runner refuses a project another team holds).
UPLOAD = ("POST", "/v1/projects/{project}/deploys")
METHOD_ROLES = {"GET": "viewer", "HEAD": "viewer", "POST": "runner"}
ROUTE_ROLES = {
    # Dead letters hold raw events of every project.
    ("GET", "/v1/dead-letters"): "admin",
    UPLOAD: "deployer",
    ("POST", "/v1/projects/{project}/promotions"): "deployer",
}
_TOKEN = web.RequestKey("token", principals.Token)


def token_of(request: web.Request) -> principals.Token:
    """The authenticated token of a request (every route but PUBLIC has one)."""
    return request[_TOKEN]


def route_role(method: str, route: str) -> str:
    """The least role that may call `method route` (a route as registered, `{name}` and all)."""
    return ROUTE_ROLES.get((method, route)) or METHOD_ROLES.get(method, "admin")


def _route(request: web.Request) -> str | None:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else None


def _unauthorized(message: str) -> web.Response:
    resp = error(401, message)
    resp.headers[hdrs.WWW_AUTHENTICATE] = 'Bearer realm="jetdbt"'
    return resp


@web.middleware
async def authenticate(request: web.Request, handler) -> web.StreamResponse:
    if _route(request) in PUBLIC or request.match_info.http_exception is not None:
        return await handler(request)  # public, or no such route (guard's 404 or 405)
    header = request.headers.get(hdrs.AUTHORIZATION, "")
    scheme, _, bearer = header.partition(" ")
    if not header:
        return _unauthorized("missing credentials: send 'Authorization: Bearer <token>'")
    if scheme.lower() != "bearer" or not bearer.strip():
        return _unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    try:
        request[_TOKEN] = await principals.authenticate(request.app[BUS], bearer.strip())
    except principals.BadToken as exc:
        return _unauthorized(str(exc))
    return await handler(request)


async def _project_of(request: web.Request) -> str | None:
    """The one project a request is about: its `project`, or its run's project."""
    if "project" in request.match_info:
        return path(request, "project")
    if "run_id" in request.match_info:
        return await run_project(request.app[POOL], path(request, "run_id"))
    return None


async def _scope_problem(
    token: principals.Token, request: web.Request, claiming: bool
) -> web.Response | None:
    project = await _project_of(request)
    if project is None:
        return None  # not about one project, or an unknown run: the route answers 404
    return await _project_scope(token, request, project, claiming)


async def project_problem(request: web.Request, project: str) -> web.Response | None:
    """A 403 when the request's token may not read `project`, else None: for a route that
    learns a run's project from the log, before the projection (and `authorize`) knows it."""
    token = token_of(request)
    return None if token.role == "admin" else await _project_scope(token, request, project)


async def scope_problem(
    db: Database, token: principals.Token, project: str, claiming: bool = False
) -> str | None:
    """Why `token` may not read `project` (its pattern, or the project's team), else None;
    `claiming`: a project no team holds yet is the token's to take (UPLOAD)."""
    if token.role == "admin":
        return None
    if not principals.project_matches(token.project, project):
        return f"token {token.id} covers projects matching {token.project!r}, not {project!r}"
    team = await project_team(db, project)
    if team != token.team and not (claiming and team is None):
        return (
            f"project {project!r} is not a project of team {token.team!r}"
            " (a project's team is the team of its deployer)"
        )
    return None


async def _project_scope(
    token: principals.Token, request: web.Request, project: str, claiming: bool = False
) -> web.Response | None:
    problem = await scope_problem(request.app[POOL], token, project, claiming)
    return None if problem is None else error(403, problem)


async def _claim_problem(token: principals.Token, request: web.Request) -> web.Response | None:
    """A body may repeat the token's principal in `requested_by`, never name another."""
    try:
        body = msgspec.json.decode(await request.read())
    except msgspec.DecodeError:
        return None  # the route says what is wrong with it
    claimed = body.get("requested_by") if isinstance(body, dict) else None
    if not isinstance(claimed, str) or len(claimed) > commands.MAX_PRINCIPAL_CHARS:
        return None  # not a principal at all: the route's decoder names what is wrong
    problem = principals.claim_problem(claimed, token.principal)
    return error(400, problem) if problem else None


@web.middleware
async def authorize(request: web.Request, handler) -> web.StreamResponse:
    route = _route(request)
    if route is None or route in PUBLIC:
        return await handler(request)
    token = token_of(request)
    # HEAD is answered by the GET handler: it needs what GET needs.
    method = "GET" if request.method == "HEAD" else request.method
    need = route_role(method, route)
    if not principals.role_allows(token.role, need):
        return error(
            403,
            f"{request.method} {route} needs role {need!r}; token {token.id} has {token.role!r}",
        )
    upload = (method, route) == UPLOAD
    if token.role != "admin":
        refused = await _scope_problem(token, request, claiming=upload)
        if refused is not None:
            return refused
    if request.method == "POST" and not upload:
        refused = await _claim_problem(token, request)
        if refused is not None:
            return refused
    return await handler(request)

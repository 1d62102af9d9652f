"""`GET /v1/whoami`: the token a request carries, as the API sees it (never its secret).

A client that holds only a token learns from it what it may do: the MCP server lists a
viewer's token no tool that changes anything, from the role this route gives.
"""

from __future__ import annotations

from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import respond

__all__ = ["routes"]


routes = web.RouteTableDef()


@routes.get("/v1/whoami")
async def whoami(request: web.Request) -> web.Response:
    token = auth.token_of(request)
    return respond(schemas.shaped(schemas.Whoami, token))

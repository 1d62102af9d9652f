"""The MCP server over streamable HTTP, on its own port beside the API (JETDBT_MCP_PORT).

Every HTTP request must carry `Authorization: Bearer <token>`; the gate sends the header
as it came to the API (`GET /v1/whoami`) and answers the API's own 401 when it is missing,
malformed or not valid, so a revoked token is refused at its next request here too. Tools
then call the API with the same header. Stateless: each POST is answered on its own, no
session is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import aiohttp
import msgspec
import uvicorn
from jetdbt.services.mcp.api_client import Api, ApiRefused
from jetdbt.services.mcp.server import build_server, whoami

__all__ = ["McpHttp", "PATH", "McpPortInUse"]

PATH = "/mcp"


class McpPortInUse(OSError):
    """The MCP port cannot be bound; the message names it and the setting."""


class _Embedded(uvicorn.Server):
    """uvicorn inside the stack's event loop: the stack owns the stop signals."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def _answer_401(send, message: str) -> None:
    body = msgspec.json.encode({"error": message})
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="jetdbt"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _gate(app, api: Api):
    """The ASGI app `app` behind the API's authentication of the request's credentials."""

    async def gated(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        given = [v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"]
        try:
            await whoami(api, given[0] if given else "")
        except ApiRefused as exc:
            if exc.status == 401:
                return await _answer_401(send, exc.error)
            raise
        return await app(scope, receive, send)

    return gated


class McpHttp:
    """One MCP HTTP server in this event loop; `url` is where an agent connects."""

    def __init__(self, session: aiohttp.ClientSession, server: _Embedded, task, url: str):
        self._session, self._server, self._task, self.url = session, server, task, url

    @classmethod
    async def start(cls, host: str, port: int, api_url: str) -> McpHttp:
        # IPPROTO_TCP named, or asyncio leaves Nagle on for accepted connections (it sets
        # TCP_NODELAY only on sockets that say TCP): 40 ms of delayed ACK on every answer.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise McpPortInUse(
                f"the MCP server cannot listen on {host}:{port} ({exc.strerror});"
                " set JETDBT_MCP_PORT to a free port, or stop what holds this one"
            ) from None
        session = aiohttp.ClientSession()
        api = Api(api_url, session)
        mcp = build_server(api, lambda ctx: ctx.request.headers.get("authorization", ""))
        app = mcp.streamable_http_app(
            streamable_http_path=PATH, stateless_http=True, json_response=True, host=host
        )
        config = uvicorn.Config(
            _gate(app, api), log_config=None, access_log=False, lifespan="on", log_level="warning"
        )
        server = _Embedded(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name="mcp http")
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            await session.close()
            task.result()  # raises what stopped it
        bound = sock.getsockname()[1]
        return cls(session, server, task, f"http://{host}:{bound}{PATH}")

    def stopped(self) -> bool:
        return self._task.done()

    async def stop(self) -> None:
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, timeout=5)
        await self._session.close()

"""`jetdbt mcp`: the MCP server over stdio, for an agent on this machine.

The token is the one the CLI uses (`--token-file`, else JETDBT_TOKEN, else the admin token
`jetdbt up` keeps), checked against the API once before serving, so a wrong one fails at
start with the API's reason instead of at the agent's first call. stdout carries only MCP
messages; logs go to stderr.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
from jetdbt.services.mcp.api_client import Api, ApiRefused
from jetdbt.services.mcp.server import build_server, whoami
from mcp.server.stdio import stdio_server

__all__ = ["StdioRefused", "read_token_file", "serve_stdio"]


class StdioRefused(RuntimeError):
    """`jetdbt mcp` cannot serve: the message says what to change."""


def read_token_file(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise StdioRefused(f"--token-file {path}: {exc.strerror}") from None
    if not token:
        raise StdioRefused(f"--token-file {path} is empty")
    return token


async def serve_stdio(api_url: str, token: str) -> None:
    auth = f"Bearer {token}"
    async with aiohttp.ClientSession() as session:
        api = Api(api_url, session)
        try:
            await whoami(api, auth)
        except ApiRefused as exc:
            raise StdioRefused(f"the API at {api_url} refused the token: {exc.error}") from None
        except aiohttp.ClientError as exc:
            raise StdioRefused(f"the API at {api_url} did not answer: {exc}") from None
        server = build_server(api, lambda ctx: auth)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

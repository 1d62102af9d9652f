"""The MCP door's one way to the API: an HTTP call of a REST route with the caller's token."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
from yarl import URL

__all__ = ["Api", "ApiRefused", "route_path"]


class ApiRefused(Exception):
    """A refusal with an HTTP status: the API's 4xx or 5xx and its `error` word for word,
    or a tool's own (a node the graph does not hold) in the same shape."""

    def __init__(self, status: int, error: str):
        super().__init__(f"{status}: {error}")
        self.status = status
        self.error = error


def route_path(route: str, values: dict[str, Any]) -> str:
    """`route` (`/v1/runs/{run_id}`) with each `{name}` replaced by its value, encoded whole
    (a relation key's `/` included), so a value cannot reach another route."""
    for name, value in values.items():
        route = route.replace("{" + name + "}", quote(str(value), safe=""))
    return route


class Api:
    """The API at `base_url`, through one aiohttp session (the owner closes it)."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession):
        self.base_url = base_url.rstrip("/")
        self.session = session

    async def call(
        self,
        auth: str,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
    ) -> Any:
        """The route's JSON answer; raises ApiRefused when it refused. `auth` is the caller's
        `Authorization` header value, sent as it is (none when empty): the API alone reads it."""
        url = URL(self.base_url + path, encoded=True)
        params = {k: str(v) for k, v in (query or {}).items()}
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = auth
        data = None
        if body is not None:
            data = msgspec.json.encode(body)
            headers["Content-Type"] = "application/json"
        async with self.session.request(
            method, url, params=params, data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            status = resp.status
        try:
            answer = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            answer = None
        if status >= 400:
            error = answer.get("error") if isinstance(answer, dict) else None
            raise ApiRefused(
                status, error if isinstance(error, str) else raw[:200].decode(errors="replace")
            )
        return answer

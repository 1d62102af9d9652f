"""Where a request enters the API: every parameter is checked here, once.

One middleware checks each path and query value before any route runs: no value
longer than MAX_VALUE_CHARS, none with a NUL byte or another control character,
and each parameter by the rule of its name (a project name, a run id, a relation
key, a whole number in range, a digest). Routes read the checked values through
`path`, `query` and `page`; `check_routes` refuses, at startup, a route whose path
parameter has no rule. A query parameter nobody reads is ignored.

What the caller sent wrong is a 400 `{"error": ...}` naming the parameter and
quoting at most a short prefix of its value; an HTTP error (no such route, body
too large) is the same JSON shape with its own status; anything unexpected is a
generic 500 and one log line, never a traceback.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import NamedTuple

import msgspec
from aiohttp import hdrs, web
from jetdbt.shared.blobs.artifacts import check_name
from jetdbt.shared.blobs.digests import check_digest
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.commands import MAX_PR
from jetdbt.shared.bus.subjects import (
    check_environment_name,
    check_hook_name,
    check_job_name,
    check_project,
    check_run_id,
)
from jetdbt.shared.jobs.webhooks import DELIVERY_STATES
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.runs.relations import InvalidRelation, normalise
from jetdbt.shared.wording.short_quote import quote, shorten

__all__ = [
    "BadParameter",
    "MAX_ERROR_CHARS",
    "MAX_VALUE_CHARS",
    "MAX_OFFSET",
    "Page",
    "check_routes",
    "error",
    "guard",
    "page",
    "path",
    "query",
    "respond",
]

# Longer than any project, run id, digest, relation key or node id the API serves.
MAX_VALUE_CHARS = 512
# A longer error message quotes input it should not: a decoder's message can hold a
# caller's 3,000-character field name.
MAX_ERROR_CHARS = 600
# Deeper than any listing goes; past it, an offset is a mistake (or bigint overflow).
MAX_OFFSET = 1_000_000_000
# C0 and C1 control characters (NUL among them), DEL, and lone surrogates, which
# Postgres text cannot hold.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_WHOLE = re.compile(r"-?[0-9]+\Z")
_PATH = web.RequestKey("checked_path", dict)
_QUERY = web.RequestKey("checked_query", dict)
_encoder = msgspec.json.Encoder()


class BadParameter(ValueError):
    """A parameter the caller sent that no route may read; the message names it."""


def respond(data, status: int = 200) -> web.Response:
    return web.Response(body=_encoder.encode(data), status=status, content_type="application/json")


def error(status: int, message: str) -> web.Response:
    """`{"error": message}`; a message over MAX_ERROR_CHARS keeps its head and its tail (where
    a decoder names the field), so no error echoes a caller's long input whole."""
    return respond({"error": shorten(message, MAX_ERROR_CHARS)}, status)


def _relation_key(value: str) -> str:
    try:
        return normalise(value)
    except InvalidRelation:
        raise ValueError(
            f"{quote(value)} is not a relation key: expected dbt://<warehouse>/<schema>/<name>,"
            " each part non-empty and without '/'"
        ) from None


def _unique_id(value: str) -> str:
    """A dbt node id: `<resource type>.<package>.<name...>`, dots between non-empty parts."""
    parts = value.split(".")
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"{quote(value)} is not a node id: expected <type>.<package>.<name>")
    return value


def _whole(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def rule(value: str) -> int:
        if not _WHOLE.match(value):
            raise ValueError(f"{quote(value)} is not a whole number")
        number = int(value)
        if number < minimum:
            raise ValueError(f"{quote(value)} is below {minimum}")
        if maximum is not None and number > maximum:
            raise ValueError(f"{quote(value)} is above {maximum}")
        return number

    return rule


def _flag(value: str) -> bool:
    if value not in ("true", "false"):
        raise ValueError(f"{quote(value)} is not true or false")
    return value == "true"


def _one_of(*allowed: str) -> Callable[[str], str]:
    def rule(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"{quote(value)} is not one of {', '.join(allowed)}")
        return value

    return rule


@functools.cache
def _projections() -> tuple[str, ...]:
    return tuple(contract.load().projections)


def _projection(value: str) -> str:
    known = _projections()
    if value not in known:
        raise ValueError(f"{quote(value)} is no projection; known: {', '.join(known)}")
    return value


# The rule of each parameter, by its name; a rule returns the value a route reads, or
# raises ValueError saying what is wrong.
PATH_RULES: dict[str, Callable[[str], object]] = {
    "project": check_project,
    "run_id": check_run_id,
    "job": check_job_name,
    "hook": check_hook_name,
    "key": _relation_key,
    "unique_id": _unique_id,
    "name": check_name,  # a run's artifact
}
QUERY_RULES: dict[str, Callable[[str], object]] = {
    "limit": _whole(minimum=1),  # above a route's maximum reads as its maximum
    "offset": _whole(minimum=0, maximum=MAX_OFFSET),
    "after": str,  # a graph page's last node id
    "version": check_digest,  # a version is its bundle's digest
    "projection": _projection,
    "state": _one_of(*DELIVERY_STATES),  # a webhook delivery's attempts
    "environment": check_environment_name,  # a project environment (prod, staging, dev)
    "job": check_job_name,  # a saved job's runs
    "pr": _whole(minimum=0, maximum=MAX_PR),  # a pull request's number (0: none)
    "promote": _flag,
    "replace_source": _flag,
    "source": str,  # a deploy's source mark, repeated (DeployCommand checks)
}


def check_routes(app: web.Application) -> None:
    """Refuse a route with a path parameter that has no rule in PATH_RULES."""
    for resource in app.router.resources():
        pattern = resource.get_info().get("pattern")
        for name in pattern.groupindex if pattern is not None else ():
            if name not in PATH_RULES:
                raise LookupError(
                    f"route {resource.canonical} has path parameter {name!r} with no rule;"
                    f" add one to PATH_RULES (known: {', '.join(PATH_RULES)})"
                )


def _plain(where: str, name: str, value: str) -> str:
    if len(value) > MAX_VALUE_CHARS:
        raise BadParameter(
            f"{where} parameter {quote(name)} is {quote(value)}:"
            f" at most {MAX_VALUE_CHARS} characters"
        )
    if _CONTROL.search(value):
        raise BadParameter(
            f"{where} parameter {quote(name)} is {quote(value)}:"
            " control characters (such as NUL) are not allowed"
        )
    return value


def _checked(where: str, rules: dict, values) -> dict:
    checked = {}
    for name, value in values.items():
        _plain(where, name, value)
        if name in rules and name not in checked:
            try:
                checked[name] = rules[name](value)
            except ValueError as exc:
                raise BadParameter(f"{where} parameter {name!r}: {exc}") from None
    return checked


def path(request: web.Request, name: str):
    """A path parameter as its rule returned it (a relation key normalised)."""
    return request[_PATH][name]


def query(request: web.Request, name: str, default=None):
    """A query parameter as its rule returned it (a number as an int), else `default`."""
    return request[_QUERY].get(name, default)


class Page(NamedTuple):
    """`limit` rows from `offset`; a route reads one row more to tell whether there is a next."""

    limit: int
    offset: int

    def rows(self, fetched: list) -> tuple[list, dict | None]:
        """The page's rows of the `limit + 1` fetched, and the query of the next page."""
        if len(fetched) > self.limit:
            return fetched[: self.limit], {"offset": self.offset + self.limit}
        return fetched, None


def page(request: web.Request, default: int, maximum: int) -> Page:
    """`?limit=` (`default` when absent, `maximum` when above it) and `?offset=`."""
    return Page(min(query(request, "limit", default), maximum), query(request, "offset", 0))


@web.middleware
async def guard(request: web.Request, handler) -> web.StreamResponse:
    try:
        request[_PATH] = _checked("path", PATH_RULES, request.match_info)
        request[_QUERY] = _checked("query", QUERY_RULES, request.query)
        return await handler(request)
    except BadParameter as exc:
        return error(400, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        resp = error(exc.status, exc.text or exc.reason)
        for name, value in exc.headers.items():  # e.g. a 405's Allow
            if name not in (hdrs.CONTENT_TYPE, hdrs.CONTENT_LENGTH):
                resp.headers.add(name, value)
        return resp
    except Exception:
        jlog.get("api").exception("request_failed", method=request.method, path=quote(request.path))
        return error(500, "internal error: the request failed; the API's log says why")

"""Fuzzing the API: no request, however malformed, gets a 5xx, and every answer is JSON.

Every route the app serves (read from its router, so a new route is fuzzed with no
change here) is sent random path segments (NUL and other control characters, '..',
unicode, percent-escapes that decode to nothing, thousands of characters), random
query parameters (the ones routes read, with values that are not numbers, negative,
huge, or hostile text; and unknown ones) and other methods; the run route is also
POSTed bodies made by mutating valid run commands. The only exceptions to JSON are the
200 answers of the routes made for something else: /metrics in Prometheus' text format,
the contract's readable page and the viewer's files (`PAGES`).

Requests whose request line would pass aiohttp's 8 KiB limit are not sent: aiohttp
refuses those (400, plain text) before any route or middleware runs.
"""

from __future__ import annotations

import json
import urllib.parse

import aiohttp
import msgspec
from hypothesis import assume, given
from hypothesis import strategies as st
from jetdbt.services.api.app import create_app
from jetdbt.services.api.boundary import MAX_ERROR_CHARS
from jetdbt.services.api.openapi import OPERATIONS
from jetdbt.services.api.ui_routes import UI_PATHS
from yarl import URL

from tests.support.fuzzing import DIGEST, FUZZ, RUN_BASES, OnLoop, drive, hostile_text, mutated
from tests.support.helpers import auth_headers

# Below aiohttp's 8,190-byte request line, with room for the method and the version.
MAX_TARGET = 8000
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
# Routes whose 200 is a page or a file for a browser, not data.
PAGES = {
    "/docs": ("text/html",),
    **{p: ("text/html", "text/javascript", "text/css") for p in UI_PATHS},
}

segments = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True),
    hostile_text,
    st.sampled_from(
        ["..", ".", "%00", "%zz", "%ff", "%ED%A0%80", "a/b", "~deployed", DIGEST,
         "dbt://main/s/t", 'dbt://main/"S"/t', "dbt://main//t", "dbt://"]
    ),
)  # fmt: skip
query_names = st.sampled_from(["limit", "offset", "after", "version", "projection"]) | st.text(
    max_size=10
)
query_values = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(
        ["", "-0", "+1", "1.5", "1e3", " 1", "\u0663", "0x10", "1_000", "NaN", DIGEST,
         "progress", "model.shop.m1", "%00", "%zz"]
    ),
    hostile_text,
)  # fmt: skip


def _escaped(value: str, raw: bool) -> str:
    """`value` %-escaped whole, or `raw`: '/' and '%' left as written (traversal, bad escapes)."""
    return urllib.parse.quote(value, safe="/%" if raw else "")


@st.composite
def requests(draw, routes: list[tuple[str, str]]) -> tuple[str, str, str, bytes | None]:
    """(method, route template, target, body) for one request to one of `routes`."""
    method, template = draw(st.sampled_from(routes))
    method = draw(st.sampled_from((method,) * 6 + METHODS))
    path = template
    while "{" in path:
        name = path[path.index("{") : path.index("}") + 1]
        path = path.replace(name, _escaped(draw(segments), draw(st.booleans())), 1)
    query = "&".join(
        f"{_escaped(k, False)}={_escaped(v, draw(st.booleans()))}"
        for k, v in draw(st.lists(st.tuples(query_names, query_values), max_size=4))
    )
    body = draw(mutated(RUN_BASES) | st.binary(max_size=64)) if method == "POST" else None
    return method, template, path + (f"?{query}" if query else ""), body


def _routes(app) -> list[tuple[str, str]]:
    """(method, template) of every route the app serves; HEAD answers without a body."""
    found = {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    return sorted(found)


def check(method: str, template: str, status: int, content_type: str, raw: bytes) -> None:
    assert status < 500, (status, raw[:300])
    if (template, status) == ("/metrics", 200):
        assert content_type == "text/plain" and raw.startswith(b"# HELP")
        return
    if template in PAGES and status == 200:
        assert content_type in PAGES[template], (template, content_type)
        return
    assert content_type == "application/json", (status, content_type, raw[:300])
    body = json.loads(raw)
    if status >= 400:
        assert list(body) == ["error"] and isinstance(body["error"], str), body
        assert len(body["error"]) <= MAX_ERROR_CHARS + 40, len(body["error"])
    elif method == "POST":
        accepted = ACCEPTED[template]
        assert status == accepted.status and set(body) == _fields(accepted.body), body


# What each POST answers when it accepts a command, as the OpenAPI document says it does.
ACCEPTED = {op.path: op for op in OPERATIONS if op.method == "POST"}


def _fields(body: type) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(body)}


async def test_no_request_gets_a_5xx_and_every_answer_is_json(stack):
    run = OnLoop()
    routes = _routes(create_app())
    assert ("POST", "/v1/projects/{project}/runs") in routes and len(routes) > 10

    async with aiohttp.ClientSession(headers=auth_headers(stack.api_url + "/")) as session:

        async def send(method: str, target: str, body: bytes | None):
            url = URL(stack.api_url + target, encoded=True)
            async with session.request(method, url, data=body) as resp:
                return resp.status, resp.content_type, await resp.read()

        @FUZZ
        @given(requests(routes))
        def any_request(request):
            method, template, target, body = request
            assume(len(target) <= MAX_TARGET)
            check(method, template, *run(send(method, target, body)))

        @FUZZ
        @given(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,12}", fullmatch=True), mutated(RUN_BASES))
        def any_run_command(project, body):
            target = f"/v1/projects/{project}/runs"
            check("POST", "/v1/projects/{project}/runs", *run(send("POST", target, body)))

        await drive(any_request)
        await drive(any_run_command)

"""The API at its boundary: malformed parameters are a 400 naming them, never a 500, and
every list is a page with a cap that says how to read the next one.

The first tests are the hostile requests a security review found answered 500 (a NUL
byte in a path or query parameter, `?limit=-1`) or echoed whole; tests/properties/test_fuzz_api.py
sends thousands more like them.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from jetdbt.services.api.app import create_app
from jetdbt.services.api.boundary import MAX_OFFSET, check_routes
from jetdbt.shared.bus import events as ev
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.project.environments import Environment
from jetdbt.shared.runs import graph as gm
from jetdbt.shared.runs.graph import SCOPE_VERSION

from tests.support.helpers import auth_headers, get_json, wait_for
from tests.support.paths import ROOT

P = "shop"
DIGEST = "sha256:" + "0" * 64
T0 = datetime(2025, 6, 2, 9, 30, tzinfo=UTC)


async def answer(method: str, url: str, **kwargs) -> tuple[int, str, dict]:
    """Status, content type and JSON body of one request (a URL's %-escapes sent as written)."""
    headers = auth_headers(str(url))
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.request(method, url, **kwargs) as r,
    ):
        return r.status, r.content_type, await r.json()


@pytest.mark.parametrize(
    ("method", "path", "body", "named"),
    [
        ("GET", "/v1/runs/a%00b", None, "path parameter 'run_id' is 'a\\x00b': control"),
        ("GET", "/v1/projects/%00/runs", None, "path parameter 'project' is '\\x00': control"),
        ("GET", "/v1/projects/shop/runs?limit=1%00", None, "query parameter 'limit' is '1\\x00'"),
        ("GET", "/v1/projects/shop/runs?limit=-1", None, "parameter 'limit': '-1' is below 1"),
        ("GET", "/v1/dead-letters?limit=abc", None, "'limit': 'abc' is not a whole number"),
        (
            "POST",
            "/v1/projects/shop/runs",
            {"command": {"label": "build"}, "requested_by": "a" * 3000},
            "length <= 128 - at `$.requested_by`",
        ),
        ("POST", "/v1/projects/shop/runs", {"command": {"label": "build"}, "pr": -1}, "`$.pr`"),
        (
            "POST",
            "/v1/projects/shop/runs",
            {"command": {"label": "close_pr"}},
            "close_pr closes a pull request's schema: the run names its pr",
        ),
    ],
    ids=["nul-in-run-id", "nul-in-project", "nul-in-limit", "negative-limit", "limit-abc",
         "long-requested-by", "negative-pr", "close-without-pr"],
)  # fmt: skip
async def test_a_hostile_request_the_review_found_is_a_400_naming_the_parameter(
    stack, method, path, body, named
):
    status, content_type, answered = await answer(method, stack.api_url + path, json=body)
    assert (status, content_type) == (400, "application/json")
    assert list(answered) == ["error"] and named in answered["error"]
    assert len(answered["error"]) < 300  # a short prefix of the value, never all of it


async def test_a_parameter_quotes_a_prefix_of_its_value_and_checks_its_rule(stack):
    base = stack.api_url
    status, body = await get_json(f"{base}/v1/projects/{'x' * 500}/runs")
    assert status == 400 and "(500 characters)" in body["error"] and len(body["error"]) < 300
    status, body = await get_json(f"{base}/v1/projects/{'x' * 600}/runs")
    assert status == 400 and "at most 512 characters" in body["error"]
    status, body = await get_json(f"{base}/v1/projects/Shop/deploys")
    assert status == 400 and body["error"].startswith("path parameter 'project': project name")
    status, body = await get_json(f"{base}/v1/runs/a..b/graph")
    assert status == 400 and "path parameter 'run_id': run id 'a..b' is invalid" in body["error"]
    status, body = await get_json(f"{base}/v1/relations/{'y' * 200}")
    assert status == 400 and "is not a relation key" in body["error"]
    assert len(body["error"]) < 300
    status, body = await get_json(f"{base}/v1/projects/shop/graph?version=..%2Fetc")
    assert status == 400 and "query parameter 'version'" in body["error"]
    assert "is not a content digest" in body["error"]
    status, body = await get_json(f"{base}/v1/dead-letters?projection=nope")
    assert status == 400 and "'nope' is no projection; known: progress" in body["error"]
    status, body = await get_json(f"{base}/v1/projects/shop/runs?offset={MAX_OFFSET + 1}")
    assert status == 400 and f"is above {MAX_OFFSET}" in body["error"]
    status, body = await get_json(f"{base}/v1/projects/shop/runs?limit=1.5")
    assert status == 400 and "'1.5' is not a whole number" in body["error"]
    status, body = await get_json(f"{base}/v1/projects/shop/runs?limit={'9' * 400}&x=%01")
    assert status == 400 and "query parameter 'x'" in body["error"]  # unknown, yet no NUL
    status, body = await get_json(f"{base}/v1/projects/shop/runs?limit={'9' * 400}&x=1")
    assert status == 200 and body == {"project": "shop", "runs": [], "next": None}
    # A decoder's message that would echo a 3,000-character field name is cut in the middle.
    long_field = {"command": {"label": "build"}, "x" * 3000: 1}
    status, _, body = await answer("POST", f"{base}/v1/projects/shop/runs", json=long_field)
    assert status == 400 and "unknown field" in body["error"] and len(body["error"]) < 700


class _FailingPool:
    """A pool whose every use fails with a message that must not reach the caller."""

    def __getattr__(self, name: str):
        raise RuntimeError("connection to 10.0.0.7 failed: password=hunter2")

    async def close(self) -> None:
        pass


class _NoBus:
    async def close(self) -> None:
        pass


async def _opened(thing):
    return thing


@pytest.fixture
async def no_database():
    """The real app over a pool that always fails; nothing else runs."""
    app = create_app(open_pool=lambda: _opened(_FailingPool()), open_bus=lambda: _opened(_NoBus()))
    async with TestClient(TestServer(app)) as client:
        yield client


async def test_an_unexpected_failure_is_a_generic_500_and_a_log_line(no_database):
    log = io.StringIO()
    jlog.configure("info", stream=log)
    try:
        resp = await no_database.get("/healthz")  # needs no token: the pool fails first
        body = await resp.json()
    finally:
        jlog.configure("warning")  # as tests/conftest.py left it
    assert resp.status == 500 and resp.content_type == "application/json"
    assert body == {"error": "internal error: the request failed; the API's log says why"}
    [logged] = [json.loads(line) for line in log.getvalue().splitlines()]
    assert logged["event"] == "request_failed" and logged["level"] == "error"
    assert logged["method"] == "GET" and logged["path"] == "'/healthz'"
    assert "hunter2" in logged["exception"]  # the operator reads it; the caller does not


async def test_http_errors_are_json_too(no_database):
    resp = await no_database.get("/v1/no/such/route")
    assert (resp.status, resp.content_type) == (404, "application/json")
    assert await resp.json() == {"error": "404: Not Found"}
    resp = await no_database.delete("/v1/projects/shop/runs")
    assert (resp.status, resp.content_type) == (405, "application/json")
    assert set(resp.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}


async def test_a_body_too_large_and_a_bad_parameter_are_json_refusals(stack):
    url = f"{stack.api_url}/v1/projects/shop/runs"
    status, kind, body = await answer("POST", url, data=b"x" * (2 * 1024 * 1024))
    assert (status, kind) == (413, "application/json")
    assert "Maximum request body size" in body["error"]
    # A malformed parameter is refused before the route touches the database.
    status, _, _ = await answer("GET", f"{url}?limit=0")
    assert status == 400


async def _nothing(request: web.Request) -> web.Response:
    return web.Response()


def test_a_route_with_an_unchecked_path_parameter_is_refused_at_startup():
    app = web.Application()
    app.router.add_get("/v1/things/{thing}", _nothing)
    with pytest.raises(LookupError, match="path parameter 'thing' with no rule"):
        check_routes(app)


def _listed(i: int) -> list[ev.Event]:
    """One row for each project list route, the i-th of its kind."""
    at = T0 + timedelta(seconds=i)
    return [
        ev.RunRequested(project=P, run_id=f"r{i}", at=at, requested_at=at, command={}),
        ev.DeployRequested(
            project=P, deploy_id=f"d{i}", at=at, bundle_digest=DIGEST, bundle_size=1
        ),
        ev.RetryStateSaved(
            project=P, principal=f"u{i}", run_id=f"r{i}", attempt=1, run_results_digest=DIGEST,
            version=DIGEST, profile_digest=DIGEST, command={"label": "build"},
        ),
        ev.StatePublished(
            project=P, environment=Environment(warehouse="main", target=f"t{i}", schema="s",
            database="d"), run_id=f"r{i}", version=DIGEST, manifest_digest=DIGEST, manifest_size=1,
        ),
    ]  # fmt: skip


async def pages(url: str, key: str, size: int) -> list[dict]:
    """Every row of a list route, read `size` at a time by following `next`."""
    rows, query = [], {"limit": size}
    while query is not None:
        status, body = await get_json(f"{url}?{'&'.join(f'{k}={v}' for k, v in query.items())}")
        assert status == 200, body
        assert len(body[key]) <= size
        rows += body[key]
        query = body["next"] and {"limit": size, **body["next"]}
    return rows


async def test_every_list_route_reads_in_pages_that_say_where_the_next_starts(stack):
    for i in range(5):
        for event in _listed(i):
            await stack.bus.publish(event)
        await stack.bus.js.publish(f"dbt.evt.deploy.{P}.d{i}.requested", b"not json %d" % i)
    routes = {
        "runs": f"{stack.api_url}/v1/projects/{P}/runs",
        "deploys": f"{stack.api_url}/v1/projects/{P}/deploys",
        "retry_state": f"{stack.api_url}/v1/projects/{P}/retry-state",
        "environments": f"{stack.api_url}/v1/projects/{P}/environments",
        "dead_letters": f"{stack.api_url}/v1/dead-letters",
    }

    async def all_projected():
        found = {key: (await get_json(url))[1] for key, url in routes.items()}
        return found if all(len(body[key]) == 5 for key, body in found.items()) else None

    whole = await wait_for(all_projected)
    for key, url in routes.items():
        assert whole[key]["next"] is None
        assert await pages(url, key, 2) == whole[key][key], key
        assert await pages(url, key, 5) == whole[key][key], key
    assert [r["run_id"] for r in whole["runs"]["runs"]] == ["r4", "r3", "r2", "r1", "r0"]
    dead = whole["dead_letters"]["dead_letters"][0]
    assert dead["data"] == "not json 0" and dead["data_size"] == 10
    status, body = await get_json(f"{routes['runs']}?limit=2&offset=4")
    assert status == 200 and [r["run_id"] for r in body["runs"]] == ["r0"] and body["next"] is None
    status, body = await get_json(f"{routes['runs']}?limit=100000")  # above the cap: the cap
    assert status == 200 and len(body["runs"]) == 5


def _graph(n: int) -> gm.Graph:
    """A chain m0 <- m1 <- ... of n models, each column edge into the next model."""
    ids = [f"model.{P}.m{i}" for i in range(n)]
    nodes = [
        gm.GraphNode(unique_id=u, resource_type="model", name=u, relation=f"dbt://main/s/m{i}")
        for i, u in enumerate(ids)
    ]
    edges = [gm.GraphEdge(a, b, "ref") for a, b in zip(ids, ids[1:], strict=False)]
    columns = [gm.ColumnEdge(a, "id", b, "id", "copy") for a, b in zip(ids, ids[1:], strict=False)]
    return gm.Graph(
        relation_root="dbt://main", default_database=None, nodes=nodes, edges=edges,
        column_edges=columns + [gm.ColumnEdge(ids[0], "id", "model.elsewhere.z", "id", "copy")],
    )  # fmt: skip


async def test_a_graph_reads_in_pages_of_nodes_with_each_edge_once(stack):
    graph = _graph(7)
    blob = msgspec.json.encode(graph)
    digest = await stack.bus.put_blob(blob)
    await stack.bus.publish(
        ev.GraphIngested(
            project=P, version=DIGEST, scope=SCOPE_VERSION, graph_digest=digest,
            graph_size=len(blob), node_count=7, edge_count=6,
        )
    )  # fmt: skip
    url = f"{stack.api_url}/v1/projects/{P}/graph"

    async def whole():
        status, body = await get_json(url)
        return body if status == 200 else None

    body = await wait_for(whole)
    assert len(body["nodes"]) == 7 and body["next"] is None
    assert len(body["edges"]) == 6 and len(body["column_edges"]) == 7
    seen = {"nodes": [], "edges": [], "column_edges": []}
    query = "?limit=3"
    while query is not None:
        status, page = await get_json(url + query)
        assert status == 200 and len(page["nodes"]) <= 3
        ids = {n["unique_id"] for n in page["nodes"]}
        assert all(e["child"] in ids for e in page["edges"])
        for key in seen:
            seen[key] += page[key]
        query = page["next"] and f"?limit=3&after={page['next']['after']}"
    assert seen["nodes"] == body["nodes"]
    for key in ("edges", "column_edges"):  # each once, in pages ordered by child
        assert sorted(map(repr, seen[key])) == sorted(map(repr, body[key]))
    status, rel = await get_json(f"{stack.api_url}/v1/relations/dbt:%2F%2Fmain%2Fs%2Fm3")
    assert status == 200 and rel["truncated"] == []
    assert [n["unique_id"] for n in rel["nodes"]] == [f"model.{P}.m3"]


async def test_a_connection_that_trickles_its_header_is_closed_by_the_header_timeout(
    stack, monkeypatch
):
    """A client that sends a request's head a byte at a time holds a connection for as long
    as the server lets it: the API closes it once HEADER_TIMEOUT_SECONDS passed, while a
    prompt request on another connection is answered."""
    import asyncio
    from urllib.parse import urlsplit

    from jetdbt.services.api.app import HEADER_TIMEOUT_SECONDS

    assert stack._site_runner._kwargs["keepalive_timeout"] == HEADER_TIMEOUT_SECONDS <= 10
    url = urlsplit(stack.api_url)
    slow = []
    for _ in range(20):
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        await writer.drain()
        slow.append((reader, writer))
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def trickle(reader, writer) -> float:
        while True:
            try:
                writer.write(b"a")
                await writer.drain()
            except ConnectionError:
                return loop.time() - started
            try:
                if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                    return loop.time() - started  # closed by the server
            except TimeoutError:
                pass
            if loop.time() - started > HEADER_TIMEOUT_SECONDS + 20:
                return float("inf")

    tasks = [asyncio.create_task(trickle(r, w)) for r, w in slow]
    status, _ = await get_json(f"{stack.api_url}/healthz")
    assert status == 200  # served beside them
    closed_after = await asyncio.gather(*tasks)
    for _, writer in slow:
        writer.close()
    assert max(closed_after) <= HEADER_TIMEOUT_SECONDS + 3, closed_after


def test_every_path_the_viewer_fetches_carries_values_as_encoded_segments():
    """A run id read from the page's address (`#/runs/..%2F..%2Fv1%2Fdead-letters`) would
    otherwise take the viewer's token to another route: every value interpolated into a
    fetched path goes through seg() (encodeURIComponent)."""
    import re

    ui = ROOT / "ui" / "src"
    checked = 0
    for source in ui.glob("*.js"):
        for call in re.findall(r"(?:api|fetch)\(`(/v1/[^`?]*)", source.read_text()):
            for value in re.findall(r"\$\{([^}]*)\}", call):
                checked += 1
                assert value.startswith(("seg(", "encodeURIComponent(")), (source.name, call)
    assert checked >= 8

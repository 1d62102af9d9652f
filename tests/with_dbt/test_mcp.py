"""The MCP door against a real stack, with the SDK's own client, over streamable HTTP and
over stdio (`jetdbt mcp` as an agent starts it): tools by role, refusals word for word
the REST route's, and a runner building the example and reading why it failed.

One stack for the module, as `jetdbt up` runs it (generated NATS users, an admin token).
Team analytics owns `jaffle_shop` (the example); team billing owns `billing_shop`. alice is
a runner of analytics, vera its viewer, bob a runner of billing.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import httpx2
import msgspec
import pytest
import pytest_asyncio
from jetdbt.services.cli.stack_commands import _announce_up
from jetdbt.services.mcp import resources
from jetdbt.services.mcp.api_client import Api
from jetdbt.services.mcp.http_app import McpHttp, McpPortInUse
from jetdbt.services.mcp.server import build_server
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.identity import principals
from jetdbt.shared.process.config import load
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.helpers import JETDBT, deploy_and_wait, up_stack, wait_for
from tests.support.paths import EXAMPLE

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

SHOP, BILLING = "jaffle_shop", "billing_shop"
FAILING_TEST = "test.jaffle_shop.assert_positive_order_total"
CHANGING = {"start_run", "retry_run", "cancel_run", "run_job", "change_job", "show", "compile"}
LOOKING = {"show", "compile"}  # they start a run that writes nothing


class Site(msgspec.Struct, kw_only=True):
    stack: Stack
    home: Path
    tokens: dict[str, str]
    token_files: dict[str, Path]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("mcp")
    stack = await up_stack(root / "home", pg_url)
    tokens, files = {}, {}
    for who, team, role in [
        ("ann", "analytics", "deployer"),
        ("alice", "analytics", "runner"),
        ("vera", "analytics", "viewer"),
        ("bob", "billing", "runner"),
        ("bill", "billing", "deployer"),
    ]:
        _, bearer = await principals.create_token(stack.bus, principal=who, team=team, role=role)
        tokens[who] = bearer
        files[who] = root / f"{who}.token"
        files[who].write_text(bearer + "\n")
    billing = root / BILLING
    (billing / "models").mkdir(parents=True)
    (billing / "dbt_project.yml").write_text(
        f'name: {BILLING}\nversion: "1.0.0"\nconfig-version: 2\nprofile: {BILLING}\n'
    )
    (billing / "models" / "invoices.sql").write_text("select 1 as id\n")
    for who, path, name in [("ann", EXAMPLE, SHOP), ("bill", billing, BILLING)]:
        await deploy_and_wait(stack.bus, path, name, requested_by=who)
    yield Site(stack=stack, home=stack.settings.home, tokens=tokens, token_files=files)
    await stack.stop()


async def _rest(site: Site, method: str, path: str, who: str, body=None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {site.tokens[who]}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, site.stack.api_url + path, headers=headers, json=body) as resp,
    ):
        return resp.status, await resp.json()


@asynccontextmanager
async def _http(site: Site, who: str, mode: str = "auto"):
    """The SDK's client over streamable HTTP, sending `who`'s token; `mode="legacy"` speaks
    the initialize handshake of the protocol's earlier versions, as older agents do."""
    headers = {"Authorization": f"Bearer {site.tokens[who]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(site.stack.mcp_url, http_client=http), mode=mode) as mcp,
    ):
        yield mcp


@asynccontextmanager
async def _stdio(site: Site, who: str | None, *, how: str = "token file"):
    """`jetdbt mcp` as a desktop agent starts it (docs/guide.md): the SDK's stdio client gives it
    its default environment plus the configuration's `env`. The token from a file, from
    JETDBT_TOKEN (with the API named by `--api`), or none: the admin token `jetdbt up` keeps."""
    env = {"JETDBT_HOME": str(site.home)}
    args = ["mcp"]
    if how == "token file":
        args += ["--token-file", str(site.token_files[who])]
    elif how == "env":
        env = {"JETDBT_TOKEN": site.tokens[who], "JETDBT_HOME": str(site.home / "elsewhere")}
        args += ["--api", site.stack.api_url]
    async with Client(StdioServerParameters(command=JETDBT, args=args, env=env)) as mcp:
        yield mcp


@asynccontextmanager
async def _stdio_env(site: Site, who: str):
    async with _stdio(site, who, how="env") as mcp:
        yield mcp


TRANSPORTS = {"http": _http, "stdio": _stdio, "stdio JETDBT_TOKEN": _stdio_env}


def _refusal(result) -> dict:
    assert result.is_error, result
    return json.loads(result.content[0].text)


async def _follow(mcp, run_id: str) -> dict:
    async def ended():
        result = await mcp.call_tool("get_run", {"run_id": run_id})
        if result.is_error:  # not folded yet: 404 until the projection has it
            assert _refusal(result)["status"] == 404, result
            return None
        run = result.structured_content
        return run if run["finished_at"] else None

    return await wait_for(ended, timeout=240, interval=0.5)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_viewer_lists_only_read_tools_and_is_refused_a_changing_one_by_name(
    site, transport
):
    async with TRANSPORTS[transport](site, "vera") as mcp:
        listed = {t.name: t for t in (await mcp.list_tools()).tools}
        assert not CHANGING & set(listed)
        assert {"list_projects", "get_lineage", "get_model", "get_run", "get_run_logs"} <= set(
            listed
        )
        assert "get_relation" in listed  # a reader of a project that writes it may read it
        for tool in listed.values():
            assert tool.annotations.read_only_hint is True, tool.name
            assert tool.input_schema["type"] == "object" and tool.output_schema, tool.name
        refused = await mcp.call_tool("start_run", {"project": SHOP, "command": {"label": "build"}})
    status, body = await _rest(site, "GET", "/v1/relations/dbt://main/jaffle_shop/orders", "vera")
    assert status == 200 and body["producers"], body
    status, body = await _rest(
        site, "POST", f"/v1/projects/{SHOP}/runs", "vera", {"command": {"label": "build"}}
    )
    assert status == 403
    assert _refusal(refused) == {"status": 403, **body}
    assert "needs role 'runner'" in body["error"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_runner_lists_the_changing_tools_with_their_hints(site, transport):
    async with TRANSPORTS[transport](site, "alice") as mcp:
        listed = {t.name: t for t in (await mcp.list_tools()).tools}
    assert set(listed) >= CHANGING
    for name in CHANGING:
        hints = listed[name].annotations
        assert hints.read_only_hint is False, name
        assert hints.destructive_hint is (name not in LOOKING), name
    assert listed["start_run"].annotations.idempotent_hint is False
    assert listed["retry_run"].annotations.idempotent_hint is False


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_another_teams_project_is_refused_as_the_rest_route_refuses_it(site, transport):
    calls = [
        ("list_runs", {"project": SHOP}, "GET", f"/v1/projects/{SHOP}/runs", None),
        ("get_lineage", {"project": SHOP}, "GET", f"/v1/projects/{SHOP}/graph", None),
        (
            "start_run",
            {"project": SHOP, "command": {"label": "build"}},
            "POST",
            f"/v1/projects/{SHOP}/runs",
            {"command": {"label": "build"}},
        ),
    ]
    async with TRANSPORTS[transport](site, "bob") as mcp:
        projects = (await mcp.call_tool("list_projects", {})).structured_content
        assert [p["project"] for p in projects["projects"]] == [BILLING]
        for tool, arguments, method, path, body in calls:
            refused = _refusal(await mcp.call_tool(tool, arguments))
            status, expected = await _rest(site, method, path, "bob", body)
            assert status == 403, (tool, expected)
            assert refused == {"status": status, **expected}, tool
            assert "not a project of team 'billing'" in expected["error"]


async def test_stdio_without_a_token_speaks_for_the_admin_token_up_keeps(site):
    async with _stdio(site, None, how="admin") as mcp:
        me = (await mcp.call_tool("whoami", {})).structured_content
        listed = {t.name for t in (await mcp.list_tools()).tools}
        lineage = (await mcp.call_tool("get_lineage", {"project": SHOP})).structured_content
        orders = next(n for n in lineage["nodes"] if n["unique_id"] == "model.jaffle_shop.orders")
        page = (await mcp.call_tool("get_relation", {"key": orders["relation"]})).structured_content
        climbed = _refusal(await mcp.call_tool("get_relation", {"key": "../../whoami"}))
    assert me["role"] == "admin" and "get_relation" in listed
    assert page["relation"] == orders["relation"].lower()
    assert {"kind": "dbt", "project": SHOP, "unique_id": orders["unique_id"]} in page["producers"]
    assert any(r["unique_id"] == "model.jaffle_shop.customers" for r in page["readers"])
    assert climbed["status"] == 400 and "is not a relation key" in climbed["error"]


async def test_up_prints_the_mcp_address_beside_the_apis(site, capsys):
    _announce_up(site.stack)
    printed = capsys.readouterr().out
    assert f"API {site.stack.api_url}" in printed
    assert f"MCP for agents: {site.stack.mcp_url} (streamable HTTP)" in printed
    assert site.stack.mcp_url.endswith("/mcp") and site.stack.mcp_url != site.stack.api_url


async def test_the_mcp_port_is_its_own_setting_next_to_the_apis():
    assert load({}).mcp_listen_port == 8581
    assert load({"JETDBT_API_PORT": "9000"}).mcp_listen_port == 9001
    assert load({"JETDBT_API_PORT": "0"}).mcp_listen_port == 0
    assert load({"JETDBT_MCP_PORT": "7000"}).mcp_listen_port == 7000


async def test_an_api_that_does_not_answer_is_said_so_never_a_traceback():
    async with aiohttp.ClientSession() as session:
        api = Api("http://127.0.0.1:9", session)  # the discard port: nothing listens
        async with Client(build_server(api, lambda ctx: "jdbt_0123456789ab_x")) as mcp:
            result = await mcp.call_tool("list_projects", {})
            with pytest.raises(MCPError, match="did not answer"):
                await mcp.list_tools()
    refused = _refusal(result)
    assert refused["status"] == 503
    assert refused["error"].startswith("the API at http://127.0.0.1:9 did not answer")


async def test_an_mcp_port_in_use_is_refused_naming_the_setting(site):
    port = int(site.stack.mcp_url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(McpPortInUse, match="JETDBT_MCP_PORT"):
        await McpHttp.start("127.0.0.1", port, site.stack.api_url)


async def test_an_agent_on_the_handshake_era_protocol_is_served_the_same(site):
    async with _http(site, "vera", mode="legacy") as mcp:
        assert mcp.protocol_version < "2026"
        listed = {t.name for t in (await mcp.list_tools()).tools}
        projects = (await mcp.call_tool("list_projects", {})).structured_content
    assert "get_run" in listed and not CHANGING & listed
    assert {p["project"] for p in projects["projects"]} == {SHOP}


async def test_http_without_a_valid_token_is_the_apis_401(site):
    cases = [{}, {"Authorization": "Basic YWxpY2U6eA=="}, {"Authorization": "Bearer jdbt_0_no"}]
    async with httpx2.AsyncClient(timeout=30) as http, aiohttp.ClientSession() as rest:
        for headers in cases:
            answer = await http.post(site.stack.mcp_url, json={}, headers=headers)
            async with rest.get(site.stack.api_url + "/v1/projects", headers=headers) as resp:
                expected = (resp.status, await resp.json())
            assert (answer.status_code, answer.json()) == expected, headers
            assert expected[0] == 401, expected
            assert answer.headers["www-authenticate"] == 'Bearer realm="jetdbt"'


async def test_stdio_with_a_wrong_token_stops_at_start_with_the_apis_reason(site, tmp_path):
    import asyncio
    import subprocess

    bad = tmp_path / "bad.token"
    bad.write_text("jdbt_0123456789ab_nope")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JETDBT_", "NATS_"))}
    env["JETDBT_HOME"] = str(site.home)
    done = await asyncio.to_thread(
        subprocess.run,
        [JETDBT, "mcp", "--token-file", str(bad)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "refused the token" in done.stderr and "unknown or revoked" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_runner_builds_the_example_follows_it_and_reads_the_failed_nodes_message(
    site, transport
):
    async with TRANSPORTS[transport](site, "alice") as mcp:
        started = time.monotonic()
        accepted = await mcp.call_tool(
            "start_run",
            {"project": SHOP, "command": {"label": "build", "vars": {"fail_error_test": True}}},
        )
        answered = time.monotonic() - started
        assert not accepted.is_error, accepted
        run_id = accepted.structured_content["run_id"]
        early = await mcp.call_tool("get_run", {"run_id": run_id})
        assert early.is_error or early.structured_content["finished_at"] is None
        run = await _follow(mcp, run_id)
        logs = (await mcp.call_tool("get_run_logs", {"run_id": run_id})).structured_content
        model = (
            await mcp.call_tool("get_model", {"project": SHOP, "node": "orders"})
        ).structured_content
    assert answered < 5, answered  # the id at once; dbt builds for longer than that
    assert run["status"] == "failed"
    first = run["nodes"][0]
    assert first["unique_id"] == FAILING_TEST and first["outcome"] == "failed"
    assert "Got 20 results, configured to fail if != 0" in first["message"]
    assert [n["outcome"] for n in run["nodes"]].index("passed") > 0
    assert logs["lines"] and logs["status"] == "failed"
    assert model["node"]["unique_id"] == "model.jaffle_shop.orders"
    assert {e["parent"] for e in model["parents"]} >= {"model.jaffle_shop.stg_orders"}
    assert any(t["resource_type"] == "test" for t in model["tests"])
    assert model["node"]["relation"] and model["node"]["columns"]
    assert run_id in [r["run_id"] for r in model["last_runs"]]


async def test_retry_resumes_the_failed_run_and_cancel_of_an_ended_run_is_the_routes_409(site):
    build = {"label": "build", "select": ["+orders"], "vars": {"fail_error_test": True}}
    async with _http(site, "alice") as mcp:
        accepted = await mcp.call_tool("start_run", {"project": SHOP, "command": build})
        failed = await _follow(mcp, accepted.structured_content["run_id"])
        retried = await mcp.call_tool("retry_run", {"run_id": failed["run_id"]})
        assert not retried.is_error, retried
        retry = await _follow(mcp, retried.structured_content["run_id"])
        refused = _refusal(await mcp.call_tool("cancel_run", {"run_id": failed["run_id"]}))
    assert failed["status"] == "failed"
    assert retry["command"] == {"label": "retry", "dbt_retry_job": failed["run_id"]}
    assert [n["unique_id"] for n in retry["nodes"] if n["outcome"] == "failed"] == [FAILING_TEST]
    status, body = await _rest(site, "POST", f"/v1/runs/{failed['run_id']}/cancel", "alice")
    assert refused == {"status": 409, **body}


async def test_an_agent_previews_compiles_and_reads_the_health_of_a_model(site):
    """After a failed build of its own (xdist's worksteal may run this test on a worker whose
    stack built nothing else): show and compile are real runs answered with their rows and
    SQL; the model's health is failing for its failed test, and those two runs, which only
    looked at it, are no part of it. A name the graph lacks starts no run."""
    build = {"label": "build", "select": ["+orders"], "vars": {"fail_error_test": True}}
    async with _http(site, "alice") as mcp:
        accepted = await mcp.call_tool("start_run", {"project": SHOP, "command": build})
        assert (await _follow(mcp, accepted.structured_content["run_id"]))["status"] == "failed"
        shown = await mcp.call_tool("show", {"project": SHOP, "node": "orders", "limit": 3})
        compiled = await mcp.call_tool(
            "compile", {"project": SHOP, "node": "model.jaffle_shop.orders"}
        )
        before = await _rest(site, "GET", f"/v1/projects/{SHOP}/runs?limit=500", "alice")
        missing = _refusal(await mcp.call_tool("show", {"project": SHOP, "node": "nope"}))
        too_many = _refusal(
            await mcp.call_tool("show", {"project": SHOP, "node": "orders", "limit": 501})
        )
        after = await _rest(site, "GET", f"/v1/projects/{SHOP}/runs?limit=500", "alice")
    async with _http(site, "vera") as mcp:
        health = await mcp.call_tool("get_model_health", {"project": SHOP, "node": "orders"})
        refused = _refusal(await mcp.call_tool("show", {"project": SHOP, "node": "orders"}))
    assert not shown.is_error and not compiled.is_error, (shown, compiled)
    preview, sql = shown.structured_content, compiled.structured_content
    assert (preview["status"], preview["ended"], preview["error"]) == ("passed", True, None)
    assert len(preview["rows"]) == 3 and {"order_id", "amount"} <= set(preview["rows"][0])
    assert sql["status"] == "passed" and sql["unique_id"] == "model.jaffle_shop.orders"
    assert "stg_orders" in sql["compiled_code"] and "{{" not in sql["compiled_code"]
    _, run = await _rest(site, "GET", f"/v1/runs/{preview['run_id']}", "alice")
    assert run["command"]["label"] == "show" and run["requested_by"] == "alice"
    assert missing["status"] == 404 and "has no node 'nope'" in missing["error"]
    assert too_many["status"] == 400 and "limit" in too_many["error"]
    assert len(after[1]["runs"]) == len(before[1]["runs"])
    assert refused["status"] == 403 and "needs role 'runner'" in refused["error"]
    model = health.structured_content
    assert model["health"] == "failing" and model["failing_tests"] == [FAILING_TEST]
    assert any(FAILING_TEST.rsplit(".", 1)[1] in why for why in model["reasons"])
    assert model["tests_total"] == len(model["tests"]) >= 2
    looked = {preview["run_id"], sql["run_id"]}
    assert model["runs"] and not looked & {r["run_id"] for r in model["runs"]}
    assert {r["command"] for r in model["runs"]} <= {"build", "retry"}
    assert model["sources"] == []  # the example reads seeds, not sources


async def test_arguments_are_checked_against_the_tools_schema(site):
    async with _http(site, "alice") as mcp:
        wrong = _refusal(await mcp.call_tool("list_runs", {"project": SHOP, "limit": 0}))
        extra = _refusal(await mcp.call_tool("get_run", {"run_id": "r1", "sql": "drop"}))
        unknown = _refusal(await mcp.call_tool("drop_everything", {}))
        flag = {"label": "build", "select": ["--threads=64"]}
        smuggled = _refusal(await mcp.call_tool("start_run", {"project": SHOP, "command": flag}))
    status, body = await _rest(
        site, "POST", f"/v1/projects/{SHOP}/runs", "alice", {"command": flag}
    )
    assert smuggled == {"status": 400, **body} and "select[0]" in body["error"]
    assert wrong["status"] == 400 and "limit" in wrong["error"]
    assert extra["status"] == 400 and "sql" in extra["error"]
    assert unknown["status"] == 404 and "start_run" in unknown["error"]


async def test_a_viewer_reads_a_projects_deploys_environments_and_retry_state(site):
    async with _http(site, "vera") as mcp:
        for tool, key in [
            ("list_deploys", "deploys"),
            ("list_environments", "environments"),
            ("get_retry_state", "retry_state"),
            ("list_versions", "versions"),
            ("list_promotions", "promotions"),
        ]:
            page = await mcp.call_tool(tool, {"project": SHOP, "limit": 5})
            assert not page.is_error and page.structured_content["project"] == SHOP, tool
            assert isinstance(page.structured_content[key], list), tool
        deploys = (await mcp.call_tool("list_deploys", {"project": SHOP})).structured_content
        assert deploys["deploys"][0]["requested_by"] == "ann"


async def test_resources_are_the_docs_sections_and_the_descriptors_keys(site):
    async with _http(site, "vera") as mcp:
        listed = {str(r.uri) for r in (await mcp.list_resources()).resources}
        assert listed == set(resources.RESOURCES)
        security = await mcp.read_resource("jetdbt://docs/security-model")
        agents = await mcp.read_resource("jetdbt://docs/agents")
        keys = await mcp.read_resource("jetdbt://docs/descriptor")
    text = security.contents[0].text
    assert text.startswith("## Security model") and "## Access" in text
    assert text.strip() in (resources.DOCS / "security.md").read_text()
    assert agents.contents[0].text.startswith("## AI agents (MCP)")
    assert '"mcpServers"' in agents.contents[0].text
    assert "`retry_failed_nodes.delay_seconds`" in keys.contents[0].text


async def test_a_runner_saves_lists_and_runs_a_job_and_a_viewer_is_refused_running_it(site):
    """Last in the module: the job's run becomes alice's latest run of the project."""
    job = {"command": {"label": "run_operation", "macro": "cents_to_dollars",
                       "macro_args": {"column_name": "amount"}}}  # fmt: skip
    async with _http(site, "alice") as mcp:
        saved = await mcp.call_tool(
            "change_job", {"project": SHOP, "action": "save", "name": "preview", "job": job}
        )
        assert not saved.is_error, saved

        async def listed():
            page = (await mcp.call_tool("list_jobs", {"project": SHOP})).structured_content
            return next((j for j in page["jobs"] if j["name"] == "preview"), None)

        found = await wait_for(listed, timeout=60, interval=0.5)
        accepted = await mcp.call_tool("run_job", {"project": SHOP, "job": "preview"})
        assert not accepted.is_error, accepted
        run = await _follow(mcp, accepted.structured_content["run_id"])
    assert found["spec"]["command"]["label"] == "run_operation" and found["schedule"] is None
    assert (run["status"], run["job"], run["trigger"]) == ("passed", "preview", "api")
    async with _http(site, "vera") as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        page = (await mcp.call_tool("list_jobs", {"project": SHOP})).structured_content
        refused = _refusal(await mcp.call_tool("run_job", {"project": SHOP, "job": "preview"}))
    assert "list_jobs" in names and not {"run_job", "change_job"} & names
    assert [j["name"] for j in page["jobs"]] == ["preview"]
    status, body = await _rest(site, "POST", f"/v1/projects/{SHOP}/jobs/preview/runs", "vera")
    assert status == 403 and refused == {"status": 403, **body}
    assert "needs role 'runner'" in body["error"]

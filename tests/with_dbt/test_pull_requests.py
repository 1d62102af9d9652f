"""A pull request's check as a CI job runs it (`jetdbt ci`, `jetdbt ci close`), against real
NATS, Postgres and dbt on the example project: the PR's change is built only in the PR's own
schema, deferring to production's state, while production keeps building its promoted
version; a later push replaces the PR's version; a failing PR exits 1 naming its node; the
close leaves nothing in the PR's schema. Nothing a PR does publishes state or promotes an
environment."""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import subprocess
from urllib.parse import urlsplit

import aiohttp
import duckdb
import pytest
import pytest_asyncio
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.streams import COMMANDS
from jetdbt.shared.identity import principals
from jetdbt.shared.project.bundle import MAX_BUNDLE_BYTES
from jetdbt.shared.project.schema_names import pr_schema

from tests.support.events_seen import Events
from tests.support.helpers import JETDBT, cli_env, get_json, jetdbt, wait_for
from tests.support.paths import EXAMPLE
from tests.support.shared_stack import shared_stack

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

LIFETIME = "coalesce(customer_orders.customer_lifetime_value, 0) as customer_lifetime_value"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory, pg_url, environments_cache):
    async with shared_stack(tmp_path_factory.mktemp("stack"), pg_url, environments_cache) as st:
        yield st


def _git(folder, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )


def _push(origin, folder, change: str) -> None:
    """The PR's checkout of the repository, its customers model changed: a CI checkout of
    the same repository, so the deploy shares the project's source."""
    if not folder.exists():
        _git(origin.parent, "clone", "-q", str(origin), str(folder))
    model = folder / "models" / "marts" / "customers.sql"
    model.write_text((origin / "models" / "marts" / "customers.sql").read_text().replace(
        LIFETIME, f"{LIFETIME},\n    {change}"
    ))  # fmt: skip


def _columns(path, schema: str) -> dict[str, set[str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = ?",
            [schema],
        ).fetchall()
    finally:
        con.close()
    found: dict[str, set[str]] = {}
    for table, column in rows:
        found.setdefault(table, set()).add(column)
    return found


async def test_a_pull_requests_check_builds_only_its_change_in_its_own_schema(stack, tmp_path):
    seen = Events()
    sub = await stack.bus.nc.subscribe("dbt.evt.>", cb=seen.on_msg)
    origin = tmp_path / "jaffle_shop"
    shutil.copytree(EXAMPLE, origin)
    _git(origin, "init", "-q")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "main")
    deployed = await jetdbt(stack, "deploy", str(origin))
    assert deployed.returncode == 0, deployed.stderr
    prod = json.loads((await jetdbt(stack, "run", "jaffle_shop", "--json")).stdout)
    assert prod["status"] == "passed", prod
    warehouse, schema = stack.settings.default_duckdb, prod["schema"]

    # The PR's first push, checked while production builds again.
    pr = tmp_path / "pr"
    _push(origin, pr, "7 as pr_marker")
    checked, prod_again = await asyncio.gather(
        jetdbt(stack, "ci", str(pr), "--pr", "7", "--json"),
        jetdbt(stack, "run", "jaffle_shop", "--json"),
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    first = json.loads(checked.stdout)
    assert first["schema"] == pr_schema(schema, 7) and first["deferred_to"], first
    assert not first["whole_selection"] and first["failed"] == [], first
    built = _columns(warehouse, first["schema"])
    assert set(built) == {"customers"} and "pr_marker" in built["customers"], built
    assert "pr_marker" not in _columns(warehouse, schema)["customers"]
    # Production built its promoted version, not the PR's.
    prod_run = json.loads(prod_again.stdout)
    assert prod_run["status"] == "passed" and prod_run["schema"] == schema
    started = await seen.first(
        lambda e: isinstance(e, ev.RunStarted) and e.run_id == prod_run["run_id"]
    )
    assert started.version != first["version"]

    # A second push replaces the PR's version and builds what differs from production.
    _push(origin, pr, "8 as pr_marker_two")
    again = await jetdbt(stack, "ci", str(pr), "--pr", "7", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    second = json.loads(again.stdout)
    assert second["version"] != first["version"]
    assert "pr_marker_two" in _columns(warehouse, second["schema"])["customers"]

    # A failing PR exits 1 naming its node and dbt's message.
    broken = tmp_path / "broken"
    _push(origin, broken, "no_such_column as broken")
    failing = await jetdbt(stack, "ci", str(broken), "--pr", "8")
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "failed       model.jaffle_shop.customers:" in failing.stdout
    assert "no_such_column" in failing.stdout

    # Closing drops the PR's schema and all it held; a second close has nothing to drop.
    closed = await jetdbt(stack, "ci", "close", "--pr", "7", "--project", "jaffle_shop", "--json")
    assert closed.returncode == 0, closed.stdout + closed.stderr
    dropped = json.loads(closed.stdout)
    assert dropped["schema"] == second["schema"]
    assert dropped["dropped"] == [f"{second['schema']}.customers"], dropped
    assert _columns(warehouse, second["schema"]) == {}
    twice = await jetdbt(stack, "ci", "close", "--pr", "7", "--project", "jaffle_shop")
    assert twice.returncode == 0 and "(it held nothing)" in twice.stdout, twice.stderr
    never = await jetdbt(stack, "ci", "close", "--pr", "99", "--project", "jaffle_shop")
    assert never.returncode == 0 and "(it held nothing)" in never.stdout, never.stderr
    assert "customers" in _columns(warehouse, schema)

    # Nothing a PR did published state or promoted an environment.
    await sub.unsubscribe()
    checks = {first["run_id"], second["run_id"], dropped["run_id"]}
    assert not [e for e in seen.seen if isinstance(e, ev.StatePublished) and e.run_id in checks]
    assert {e.slot() for e in seen.seen if isinstance(e, ev.Promoted) and e.pr} == {"pr:7", "pr:8"}
    promoted = {e.version for e in seen.seen if isinstance(e, ev.Promoted) and not e.pr}
    assert promoted <= {started.version}, promoted
    # The project's graph is still the one production runs, not the last PR's upload.
    status, graph = await get_json(f"{stack.api_url}/v1/projects/jaffle_shop/graph")
    assert status == 200 and graph["version"] == started.version, graph.get("version")


async def test_a_check_with_no_state_to_defer_to_builds_the_whole_selection(stack, tmp_path):
    """A project whose environment never published state: nothing to compare with, so the
    check builds everything into the PR's schema, says so, and still publishes no state."""
    seen = Events()
    sub = await stack.bus.nc.subscribe("dbt.evt.>", cb=seen.on_msg)
    project = tmp_path / "fresh"
    shutil.copytree(EXAMPLE, project)
    checked = await jetdbt(stack, "ci", str(project), "--pr", "3", "--project", "fresh", "--json")
    await sub.unsubscribe()
    assert checked.returncode == 0, checked.stdout + checked.stderr
    result = json.loads(checked.stdout)
    assert result["whole_selection"] and result["deferred_to"] is None, result
    assert "no published state" in checked.stderr
    assert {"customers", "orders"} <= set(_columns(stack.settings.default_duckdb, result["schema"]))
    assert not [e for e in seen.seen if isinstance(e, ev.StatePublished) and e.project == "fresh"]


async def _post(stack, path: str, body: bytes, token: str) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}
    url = f"{stack.api_url}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json()


def _declared_only(stack, path: str, size: int, token: str) -> tuple[int, bytes]:
    """A POST whose head says `size` bytes and whose body never follows: the API must answer
    from the head alone."""
    url = urlsplit(stack.api_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Authorization", f"Bearer {token}")
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


async def test_a_ci_system_checks_a_pull_request_through_the_api_with_a_deployer_token(
    stack, tmp_path
):
    """`jetdbt ci --api` with nothing but the API's address and a deployer's JETDBT_TOKEN: the
    bundle goes up over HTTP, the check builds in the PR's schema, the close drops it. The
    route refuses a runner's token, an oversized body, a bad `pr` or `environment`; a body
    that is no bundle ends in the runner's refusal."""
    _, deployer = await principals.create_token(
        stack.bus, principal="ci-bot", team=principals.DEFAULT_TEAM, role="deployer"
    )
    _, runner = await principals.create_token(
        stack.bus, principal="ci-runner", team=principals.DEFAULT_TEAM, role="runner"
    )
    route = "/v1/projects/viaapi/deploys"
    before = (await stack.bus.js.stream_info(COMMANDS)).state.last_seq
    status, body = await _post(stack, f"{route}?pr=5", b"anything", runner)
    assert status == 403, body
    assert (await stack.bus.js.stream_info(COMMANDS)).state.last_seq == before
    too_big = await asyncio.to_thread(_declared_only, stack, route, MAX_BUNDLE_BYTES + 1, deployer)
    assert too_big[0] == 413, too_big
    for asked, named in (("pr=-1", "'pr'"), ("pr=x", "'pr'"), ("environment=Bad!", "environment")):
        status, body = await _post(stack, f"{route}?{asked}", b"anything", deployer)
        assert status == 400 and named in body["error"], (asked, body)
    assert (await stack.bus.js.stream_info(COMMANDS)).state.last_seq == before
    status, accepted = await _post(stack, f"{route}?pr=5", b"not a bundle", deployer)
    assert status == 202, accepted

    async def refused():
        _, listed = await get_json(f"{stack.api_url}{route}")
        rows = [d for d in listed["deploys"] if d["deploy_id"] == accepted["deploy_id"]]
        return rows and rows[0]["status"] == "refused" and rows[0]

    row = await wait_for(refused)
    assert "not a valid bundle" in row["reason"] and row["requested_by"] == "ci-bot", row

    project = tmp_path / "viaapi"
    shutil.copytree(EXAMPLE, project)
    away = {k: v for k, v in cli_env(stack).items() if k != "NATS_URL"}
    env = {**away, "JETDBT_TOKEN": deployer, "JETDBT_HOME": str(tmp_path / "no_stack_here")}

    def ci(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [JETDBT, "ci", *args, "--api", stack.api_url, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    checked = await asyncio.to_thread(ci, str(project), "--pr", "5", "--project", "viaapi")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    result = json.loads(checked.stdout)
    assert result["status"] == "passed" and result["whole_selection"], result
    assert "no published state" in checked.stderr
    tables = _columns(stack.settings.default_duckdb, result["schema"])
    assert {"customers", "orders"} <= set(tables), tables
    _, run = await get_json(f"{stack.api_url}/v1/runs/{result['run_id']}")
    assert run["door"].startswith("api") and run["requested_by"] == "ci-bot" and run["pr"] == 5, run

    closed = await asyncio.to_thread(ci, "close", "--pr", "5", "--project", "viaapi")
    assert closed.returncode == 0, closed.stdout + closed.stderr
    dropped = json.loads(closed.stdout)
    assert f"{result['schema']}.customers" in dropped["dropped"], dropped
    assert _columns(stack.settings.default_duckdb, result["schema"]) == {}

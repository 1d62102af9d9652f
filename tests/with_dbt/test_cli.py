"""The CLI as a user runs it, against a stack: an unmodified project nobody here wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.helpers import duckdb_tables, get_json, jetdbt, wait_for
from tests.support.shared_stack import shared_stack

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

BIN = Path(sys.executable).parent


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory, pg_url, environments_cache):
    """One stack for the module: each test deploys a project of its own name."""
    async with shared_stack(tmp_path_factory.mktemp("stack"), pg_url, environments_cache) as st:
        yield st


@pytest.fixture
def starter(tmp_path) -> Path:
    """The project `dbt init` writes, untouched: its not_null test fails by design."""
    subprocess.run(
        [str(BIN / "dbt"), "init", "starter", "--skip-profile-setup"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},
    )
    return tmp_path / "starter"


async def test_unmodified_starter_project_deploys_and_builds(stack, starter):
    deployed = await jetdbt(stack, "deploy", str(starter))
    assert deployed.returncode == 0, deployed.stderr
    assert "deployed starter version sha256:" in deployed.stdout
    again = await jetdbt(stack, "deploy", str(starter))
    assert again.returncode == 0 and "the default environment runs it already" in again.stdout

    ran = await jetdbt(stack, "run", "starter", "--json")
    assert ran.returncode == 1, ran.stderr  # the starter's not_null test fails by design
    result = json.loads(ran.stdout)
    assert result["status"] == "failed" and result["command"] == "build"
    nodes = {n["unique_id"]: n for n in result["nodes"]}
    first = nodes["model.starter.my_first_dbt_model"]
    assert (first["status"], first["outcome"]) == ("success", "passed")
    not_null = next(
        n for uid, n in nodes.items() if uid.startswith("test.starter.not_null_my_first")
    )
    assert (not_null["status"], not_null["outcome"]) == ("fail", "failed")
    second = nodes["model.starter.my_second_dbt_model"]
    assert (second["status"], second["outcome"]) == ("skipped", "skipped")

    async def projected():
        status, body = await get_json(f"{stack.api_url}/v1/runs/{result['run_id']}")
        return body if status == 200 and body["status"] == "failed" else None

    body = await wait_for(projected)
    api_nodes = {n["unique_id"]: n for n in body["nodes"]}
    assert set(api_nodes) == set(nodes)
    for uid, node in nodes.items():
        assert (api_nodes[uid]["status"], api_nodes[uid]["outcome"]) == (
            node["status"],
            node["outcome"],
        )
    assert "my_first_dbt_model" in duckdb_tables(stack.settings.default_duckdb)


async def test_watch_prints_each_node_and_json_refusal_goes_to_stderr(stack):
    refused = await jetdbt(stack, "run", "never_deployed", "--json")
    assert refused.returncode == 3
    assert json.loads(refused.stdout)["status"] == "refused"
    assert "has no deployed version" in refused.stderr

    from tests.support.paths import EXAMPLE

    assert (await jetdbt(stack, "deploy", str(EXAMPLE))).returncode == 0
    watched = await jetdbt(stack, "run", "jaffle_shop", "--watch", "-s", "+stg_orders")
    assert watched.returncode == 0, watched.stderr
    lines = [line for line in watched.stdout.splitlines() if line.startswith("  ")]
    assert any("stg_orders" in line and "ok" in line for line in lines)
    assert any("raw_orders" in line for line in lines)
    assert "PASSED" in watched.stdout and "raw_customers" not in watched.stdout

"""No silent sharing, against real NATS, Postgres and dbt: two projects on the embedded
warehouse each build `customers` into a schema of their own, and a project whose descriptor
names another's schema is told, at deploy, which project writes which of its relations."""

from __future__ import annotations

import json

import duckdb
import pytest
from jetdbt.shared.identity import principals

from tests.support.helpers import get_json, jetdbt

pytestmark = pytest.mark.dbt


def _tiny(folder, who: str, jetdbt_yaml: str = ""):
    """A one-model dbt project whose `customers` says which project built it."""
    (folder / "models").mkdir(parents=True)
    (folder / "dbt_project.yml").write_text(
        "name: tiny\nversion: '1.0.0'\nconfig-version: 2\nprofile: tiny\n"
    )
    (folder / "models" / "customers.sql").write_text(
        f"{{{{ config(materialized='table') }}}} select '{who}' as who"
    )
    if jetdbt_yaml:
        (folder / "jetdbt.yaml").write_text(jetdbt_yaml)
    return str(folder)


def _who(path, schema: str) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(f"SELECT who FROM {schema}.customers").fetchone()[0]
    finally:
        con.close()


async def test_projects_keep_their_own_schema_and_an_overlap_is_said_at_deploy(stack, tmp_path):
    for project in ("shop_a", "shop_b"):
        deployed = await jetdbt(
            stack, "deploy", _tiny(tmp_path / project, project), "--project", project
        )
        assert deployed.returncode == 0, deployed.stderr
        assert "warning" not in deployed.stdout, deployed.stdout  # nothing shared
        built = await jetdbt(stack, "run", project, "--json")
        assert json.loads(built.stdout)["status"] == "passed", built.stdout
    warehouse = stack.settings.default_duckdb
    assert (_who(warehouse, "shop_a"), _who(warehouse, "shop_b")) == ("shop_a", "shop_b")

    # shop_c names shop_a's schema: its deploy names shop_a and the relation they share.
    same = _tiny(tmp_path / "shop_c", "shop_c", "profile:\n  schema: shop_a\n")
    told = await jetdbt(stack, "deploy", same, "--project", "shop_c")
    assert told.returncode == 0, told.stderr
    assert (
        "warning: project shop_a also writes 1 relation of shop_c: dbt://main/shop_a/customers;"
        in told.stdout
    ), told.stdout
    (tmp_path / "shop_c" / "models" / "orders.sql").write_text("select 1 as id")
    as_json = await jetdbt(stack, "deploy", same, "--project", "shop_c", "--json")
    answer = json.loads(as_json.stdout)
    assert answer["type"] == "deploy.deployed.v2", answer
    assert answer["overlaps"] == [
        {"project": "shop_a", "relations": ["dbt://main/shop_a/customers"], "count": 1}
    ]

    # Each side sees the other; a token that may not read shop_a is not told its name.
    status, body = await get_json(f"{stack.api_url}/v1/projects/shop_a/overlaps")
    assert status == 200 and [o["project"] for o in body["overlaps"]] == ["shop_c"], body
    team = await stack.pool.fetchval("SELECT team FROM deploys WHERE project = 'shop_c'")
    _, only_c = await principals.create_token(
        stack.bus, principal="c-reader", team=team, role="viewer", project="shop_c"
    )
    status, body = await get_json(f"{stack.api_url}/v1/projects/shop_c/overlaps", only_c)
    assert status == 200 and body["overlaps"][0]["project"] is None, body
    assert body["overlaps"][0]["relations"] == ["dbt://main/shop_a/customers"]
    status, body = await get_json(
        f"{stack.api_url}/v1/projects/shop_c/overlaps?version=sha256:{'0' * 64}"
    )
    assert status == 404 and "has no graph of version" in body["error"], body
    status, body = await get_json(f"{stack.api_url}/v1/relations/dbt://main/shop_a/customers")
    producers = {p["project"] for p in body["producers"]}
    assert status == 200 and producers == {"shop_a", "shop_c"}, body
    assert {(r["project"], r["environment"]) for r in body["runs"]} == {("shop_a", "prod")}

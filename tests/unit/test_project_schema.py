"""A schema per project on a warehouse that projects share: the embedded default gives each
project one named after it, a descriptor's own schema wins, other warehouses are as set."""

from __future__ import annotations

import shutil

from jetdbt.services.runner.setup.plan import make_plan
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import Warehouse, load_warehouses
from jetdbt.shared.project import descriptor
from jetdbt.shared.project.schema_names import personal_schema, pr_schema, project_schema

from tests.support.paths import EXAMPLE


def _schema(tmp_path, wh: Warehouse, project: str, jetdbt_yaml: str = "") -> str:
    folder = tmp_path / "shop"
    if not folder.exists():
        shutil.copytree(EXAMPLE, folder)
    (folder / "jetdbt.yaml").write_text(jetdbt_yaml)
    desc = descriptor.load(folder)
    plan = make_plan(desc, None, None, wh, Resolver(), folder, "dbt-core-1x", project=project)
    return plan.environment.schema


def test_each_project_has_its_own_schema_on_the_embedded_warehouse(tmp_path):
    embedded = load_warehouses(None, tmp_path / "wh" / "warehouse.duckdb")["main"]
    assert embedded.schema_per_project
    assert _schema(tmp_path, embedded, "jaffle_shop") == "jaffle_shop"
    assert _schema(tmp_path, embedded, "Shop-B.2").startswith("shop_b_2_")
    assert _schema(tmp_path, embedded, "9lives").startswith("_9lives_")
    named = "profile:\n  schema: marts\n"
    assert _schema(tmp_path, embedded, "jaffle_shop", named) == "marts"


def test_a_configured_warehouse_keeps_its_schema_unless_it_asks_for_one_per_project(tmp_path):
    path = str(tmp_path / "w.duckdb")
    plain = Warehouse(name="main", type="duckdb", path=path)
    assert _schema(tmp_path, plain, "jaffle_shop") == "main"
    set_schema = Warehouse(name="main", type="duckdb", path=path, schema="shared")
    assert _schema(tmp_path, set_schema, "jaffle_shop") == "shared"
    shared = Warehouse(name="main", type="duckdb", path=path, schema="x", schema_per_project=True)
    assert _schema(tmp_path, shared, "jaffle_shop") == "jaffle_shop"


def test_two_names_never_become_one_schema():
    """`.` and `_` (or `-` and `_`) are one character of a plain identifier: a name that is not
    one already keeps a digest of itself, so two principals or projects keep two schemas."""
    assert personal_schema("main", "ana") == "main__ana"
    assert personal_schema("main", "ana.b") != personal_schema("main", "ana_b")
    assert project_schema("a-b") != project_schema("a_b") == "a_b"
    assert len(personal_schema("m" * 60, "x" * 60)) <= 63


def test_a_persons_or_a_pull_requests_schema_is_never_another_projects():
    """Attack: team B names its project `jaffle_x` (or `jaffle_pr_3`, `jaffle__x`) so that
    team A's person `x` (or PR 3) of project `jaffle` builds, and a PR's close drops, team
    B's schema; or a principal named `pr_3` builds into PR 3's schema."""
    for project in ("jaffle_x", "jaffle__x", "jaffle_pr_3", "jaffle__pr_3", "jaffle_", "x" * 128):
        theirs = project_schema(project)
        assert "__" not in theirs and not theirs.endswith("_"), theirs
        assert theirs not in (personal_schema("jaffle", "x"), pr_schema("jaffle", 3))
    mine = project_schema("jaffle")
    assert personal_schema(mine, "pr_3") != pr_schema(mine, 3) == "jaffle__pr_3"
    assert personal_schema(project_schema("a_"), "x") != personal_schema("a", "_x")
    assert "__" in personal_schema("m" * 60, "x" * 60)

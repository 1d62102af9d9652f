"""The rules of a run's own login (services/runner/setup/run_credentials.py) that need no
server: who may ask for one, what the plan's profile keeps of the operator's login, role
names, which commands write, and where a scratch run's login acts."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml
from jetdbt.services.runner.setup import run_credentials
from jetdbt.services.runner.setup.masking import Masker
from jetdbt.services.runner.setup.plan import make_plan
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import load_warehouses
from jetdbt.shared.bus.commands import BuildCommand, SeedCommand, ShowCommand, TestCommand
from jetdbt.shared.project import descriptor
from jetdbt.shared.project.environments import Environment

from tests.support.paths import EXAMPLE

CANARY = "long-lived-s3cret"


def _warehouses(tmp_path, text: str):
    file = tmp_path / "warehouses.yaml"
    file.write_text(text)
    return load_warehouses(file, tmp_path / "unused.duckdb")


@pytest.mark.parametrize("kind", ["duckdb", "snowflake"])
def test_a_warehouse_that_cannot_issue_a_role_refuses_per_run(tmp_path, kind):
    body = {"duckdb": "path: /tmp/x.duckdb", "snowflake": "connection: {account: a}"}[kind]
    with pytest.raises(ValueError, match=f"a {kind} warehouse keeps the configured credential"):
        _warehouses(tmp_path, f"w: {{type: {kind}, credentials: per_run, {body}}}")


def test_a_per_run_warehouse_sets_no_role_of_its_own(tmp_path):
    with pytest.raises(ValueError, match="acts as its environment's writer or reader role"):
        _warehouses(
            tmp_path,
            "pg: {type: postgres, credentials: per_run,"
            " connection: {host: db, user: a, dbname: wh, role: analyst}}",
        )


def test_the_plans_profile_holds_no_login_until_the_run_has_its_own(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    (project / "jetdbt.yaml").write_text("profile:\n  warehouse: pg\n")
    warehouses = _warehouses(
        tmp_path,
        "pg: {type: postgres, host: db, user: admin, password: $env:PW, dbname: wh,"
        " schema: analytics, credentials: per_run}",
    )
    desc = descriptor.load(project)

    def plan(cmd):
        resolver = Resolver(environ={"PW": CANARY})
        return make_plan(
            desc, cmd, {}, warehouses["pg"], resolver, project, "dbt-core-1x", project="p"
        )

    built = plan(BuildCommand())
    assert CANARY not in built.profiles_text and "admin" not in built.profiles_text
    template = yaml.safe_load(built.profiles_text)["jaffle_shop"]["outputs"]["main"]
    user = run_credentials.run_role(built.lease_scope)
    assert (template["user"], template["password"]) == (user, "")
    login = run_credentials.Login(user=user, password="p4ssw0rd", role="jetdbt_w_a")
    output = yaml.safe_load(run_credentials.into_profile(built, login))["jaffle_shop"]["outputs"]
    assert output["main"] == {**template, "password": "p4ssw0rd"}
    assert run_credentials.places(built) == [built.environment]
    scratch = plan(BuildCommand(schema="ci_pr_7", defer=True))
    assert [p.schema for p in run_credentials.places(scratch)] == ["ci_pr_7", "analytics"]


def test_a_run_whose_schema_is_known_only_to_dbt_gets_no_login(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    (project / "jetdbt.yaml").write_text(
        "profile:\n  warehouse: pg\n  schema: \"{{ env_var('WHO') }}\"\n"
    )
    warehouses = _warehouses(
        tmp_path, "pg: {type: postgres, host: db, user: admin, dbname: wh, credentials: per_run}"
    )
    built = make_plan(
        descriptor.load(project), BuildCommand(), {}, warehouses["pg"], Resolver(), project, "x",
        project="p",
    )  # fmt: skip
    with pytest.raises(run_credentials.CredentialRefused, match="profile's schema is a template"):
        run_credentials.places(built)


def test_role_names_fit_postgres_and_keep_environments_and_attempts_apart():
    def env(schema, database="wh"):
        return Environment(warehouse="pg", target="main", schema=schema, database=database)

    names = {
        *run_credentials.group_roles(env("analytics")),
        *run_credentials.group_roles(env("Analytics")),
        *run_credentials.group_roles(env("analytics", "other")),
        *run_credentials.group_roles(env('we"ird-' + "x" * 80)),
        run_credentials.run_role(env("analytics").key()),
        run_credentials.run_role(env("analytics", "other").key()),
        run_credentials.run_role("run " + "r" * 200),
    }
    assert len(names) == 11
    assert all(len(n) <= 63 and n.replace("_", "").isalnum() and n.islower() for n in names)
    # 64 bits of digest: no one finds another environment's role name by searching.
    assert re.fullmatch(
        r"jetdbt_w_analytics_[0-9a-f]{16}", run_credentials.group_roles(env("analytics"))[0]
    )


def test_building_commands_write_and_the_rest_read():
    assert run_credentials.writes(BuildCommand()) and run_credentials.writes(SeedCommand())
    assert not run_credentials.writes(TestCommand())
    assert not run_credentials.writes(ShowCommand(select=["orders"]))


def test_a_dropped_logins_password_is_no_longer_looked_for():
    masker = Masker()
    masker.add(CANARY)
    masker.add("per-run-password")
    masker.forget("per-run-password")
    assert masker.mask(f"{CANARY} per-run-password") == "**** per-run-password"

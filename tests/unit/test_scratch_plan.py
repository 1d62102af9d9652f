"""A scratch schema in the plan, for a project that keeps its own profiles.yml: the run
builds into the scratch schema, a deferral reads the profile's, and nothing publishes."""

from __future__ import annotations

import shutil

import yaml
from jetdbt.services.runner.setup import environment_state as state
from jetdbt.services.runner.setup.plan import make_plan
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import Warehouse
from jetdbt.shared.bus.commands import BuildCommand
from jetdbt.shared.project import descriptor

from tests.support.paths import EXAMPLE

PROFILES = {
    "jaffle_shop": {
        "target": "dev",
        "outputs": {
            "dev": {
                "type": "postgres",
                "host": "db",
                "port": 5432,
                "user": "dbt",
                "dbname": "wh",
                "schema": "analytics",
                "password": "{{ env_var('PW') }}",
            }
        },
    }
}


def test_a_scratch_schema_replaces_the_own_profiles_schema_and_never_publishes(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    (project / "profiles.yml").write_text(yaml.safe_dump(PROFILES))
    (project / "jetdbt.yaml").write_text(
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: main\n"
    )
    desc = descriptor.load(project)
    wh = Warehouse(type="duckdb", name="main", path=str(tmp_path / "unused.duckdb"))

    def plan(cmd):
        return make_plan(desc, cmd, {}, wh, Resolver(), project, "dbt-core-1x", project="p")

    ci = plan(BuildCommand(schema="ci_pr_3", defer=True))
    written = yaml.safe_load(ci.profiles_text)["jaffle_shop"]["outputs"]["dev"]
    assert written["schema"] == "ci_pr_3" and written["password"] == "{{ env_var('PW') }}"
    assert (ci.environment.schema, ci.defers_to().schema) == ("ci_pr_3", "analytics")
    assert not state.publishes(ci) and ci.lease_scope != plan(BuildCommand()).lease_scope
    full = plan(BuildCommand())
    assert full.defers_to() == full.environment and state.publishes(full)
    assert yaml.safe_load(full.profiles_text) == PROFILES

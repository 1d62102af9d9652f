"""Where a run builds in each kind of environment: its own schema and state (staging), a
person's schema deferring to prod (dev), a pull request's schema deferring to the environment
it names; a role the environment does not let in, or an unknown environment, is refused."""

from __future__ import annotations

import shutil

import pytest
from jetdbt.services.runner.setup import environment_state as state
from jetdbt.services.runner.setup.placement import Placement, place
from jetdbt.services.runner.setup.plan import PlanRefused, make_plan
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import Warehouse
from jetdbt.shared.bus.commands import BuildCommand
from jetdbt.shared.project import descriptor
from jetdbt.shared.project.schema_names import personal_schema, pr_schema

from tests.support.paths import EXAMPLE

JETDBT_YAML = """\
environments:
  staging: {profile: {schema: stg}, roles: [deployer, admin]}
  qa: {profile: {schema: qa}, defer_to: prod}
  far: {profile: {warehouse: other}}
  sandbox: {personal: true, defer_to: far}
"""


@pytest.fixture
def plan_in(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    (project / "jetdbt.yaml").write_text(JETDBT_YAML)
    desc = descriptor.load(project)
    wh = Warehouse(type="duckdb", name="main", path=str(tmp_path / "wh.duckdb"))

    def plan(environment, cmd=None, **where):
        placed = place(desc, Placement(environment=environment, **where))
        return make_plan(
            placed.desc, cmd or BuildCommand(), {}, wh, Resolver(), project, "dbt-core-1x",
            project="shop", home_desc=placed.home, scratch_for=placed.scratch,
        )  # fmt: skip

    return plan


def test_each_environment_builds_where_it_should_and_defers_to_its_home(plan_in):
    staging = plan_in("staging")
    assert (staging.environment.schema, staging.defers_to().schema) == ("stg", "stg")
    assert state.publishes(staging) and not staging.defer
    qa = plan_in("qa", BuildCommand(defer=True))
    assert (qa.environment.schema, qa.defers_to().schema) == ("qa", "main")
    dev = plan_in("dev", principal="Ann.Lee@example")
    assert (dev.environment.schema, dev.defers_to().schema) == (
        personal_schema("main", "Ann.Lee@example"),
        "main",
    )
    assert dev.defer and not state.publishes(dev)
    assert not plan_in("dev", BuildCommand(defer=False), principal="ann").defer
    pr = plan_in("staging", pr=7)
    assert (pr.environment.schema, pr.defers_to().schema, pr.defer) == (
        pr_schema("stg", 7),
        "stg",
        True,
    )
    assert plan_in("prod", BuildCommand(schema="mine"), pr=7).environment.schema == "mine"


def test_a_role_an_unknown_environment_or_another_warehouse_is_refused(plan_in):
    with pytest.raises(PlanRefused, match="'staging' lets roles deployer, admin.*'runner'"):
        plan_in("staging", role="runner")
    with pytest.raises(descriptor.DescriptorError, match="no environment 'qq'.*dev, far, prod"):
        plan_in("qq")
    with pytest.raises(PlanRefused, match="'sandbox' defers to environment 'far'.*'other'"):
        plan_in("sandbox", principal="ann")
    with pytest.raises(PlanRefused, match="names no principal"):
        plan_in("dev")

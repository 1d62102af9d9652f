"""A project's named environments against real NATS, Postgres and dbt: staging builds in its
own schema, a person's dev run builds into a schema of their own deferring to prod, a role
an environment does not let in and an unknown environment are refused, a job runs in its
environment, and a job takes no higher role than its saver's whoever starts it."""

from __future__ import annotations

import json
import shutil

import aiohttp
import duckdb
import msgspec
import pytest
import pytest_asyncio
from jetdbt.services.cli import client
from jetdbt.services.runner.facts import jobs
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.identity import principals
from jetdbt.shared.project.schema_names import personal_schema

from tests.support.helpers import deploy_and_wait, jetdbt, wait_for
from tests.support.paths import EXAMPLE
from tests.support.shared_stack import shared_stack

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

PROJECT = "shop"
JETDBT_YAML = """\
profile: {schema: shop}
environments:
  staging: {profile: {schema: shop_staging}, roles: [deployer, admin]}
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url, environments_cache):
    """One stack: jaffle_shop deployed with a staging environment and built in prod; a
    runner token for principal ann."""
    async with shared_stack(tmp_path_factory.mktemp("stack"), pg_url, environments_cache) as stack:
        project = tmp_path_factory.mktemp("envs") / PROJECT
        shutil.copytree(EXAMPLE, project)
        (project / "jetdbt.yaml").write_text(JETDBT_YAML)
        await deploy_and_wait(stack.bus, project, PROJECT)
        prod = await client.run(stack.bus, PROJECT, RunCommand(command=BuildCommand()))
        assert isinstance(prod, ev.RunFinished) and prod.result.status == "passed", prod
        _, ann = await principals.create_token(
            stack.bus, principal="ann", team=principals.DEFAULT_TEAM, role="runner"
        )
        yield stack, ann, prod.run_id


def _tables(stack, schema: str) -> set[str]:
    con = duckdb.connect(str(stack.settings.default_duckdb), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [schema]
        ).fetchall()
    finally:
        con.close()
    return {r[0] for r in rows}


async def _post_run(stack, bearer: str, body: dict) -> ev.Event:
    """POST a run as `bearer`'s principal; the run's final event and its RunRequested."""
    url = f"{stack.api_url}/v1/projects/{PROJECT}/runs"
    headers = {"Authorization": f"Bearer {bearer}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as r,
    ):
        assert r.status == 202, await r.text()
        run_id = (await r.json())["run_id"]
    final = await wait_for(lambda: stack.bus.run_end(PROJECT, run_id), timeout=120)
    requested = await stack.bus.last_event(subjects.run_event(PROJECT, run_id, "requested"))
    return final, requested


async def test_a_staging_run_builds_into_the_staging_schema(site):
    stack, _, _ = site
    ran = await jetdbt(stack, "run", PROJECT, "--env", "staging", "-s", "+stg_orders", "--json")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    requested = await stack.bus.last_event(subjects.run_event(PROJECT, run_id, "requested"))
    assert requested.environment == "staging"
    assert _tables(stack, "shop_staging") == {"raw_orders", "stg_orders"}


async def test_a_dev_run_builds_into_the_callers_schema_deferring_to_prod(site):
    stack, ann, prod_run = site
    body = {"command": {"label": "build", "select": ["customers"]}, "environment": "dev"}
    final, requested = await _post_run(stack, ann, body)
    assert isinstance(final, ev.RunFinished) and final.result.status == "passed", final
    assert (requested.environment, requested.requested_by) == ("dev", "ann")
    # Only the selected model is in ann's schema: its upstream was read from prod's.
    assert _tables(stack, personal_schema("shop", "ann")) == {"customers"}
    assert final.result.deferred_to == prod_run


async def test_a_role_the_environment_does_not_let_in_and_an_unknown_one_are_refused(site):
    stack, ann, _ = site
    final, _ = await _post_run(
        stack, ann, {"command": {"label": "build"}, "environment": "staging"}
    )
    assert isinstance(final, ev.RunRefused), final
    assert "'staging' lets roles deployer, admin" in final.reason and "'runner'" in final.reason
    final, requested = await _post_run(
        stack, ann, {"command": {"label": "build"}, "environment": "qa"}
    )
    assert isinstance(final, ev.RunRefused) and requested.environment == "qa", final
    assert "no environment 'qa'" in final.reason and "dev, prod, staging" in final.reason


async def test_a_job_runs_in_its_environment(site):
    stack, _, _ = site
    spec = commands.JobSpec(command=BuildCommand(select=["+stg_payments"]), environment="staging")
    saved = await client.job(
        stack.bus, PROJECT, commands.JobCommand(action="save", name="nightly", job=spec)
    )
    assert isinstance(saved, ev.JobSaved), saved
    final = await client.run(
        stack.bus, PROJECT, RunCommand(command=commands.JobRun(name="nightly"))
    )
    assert isinstance(final, ev.RunFinished) and final.result.status == "passed", final
    requested = await stack.bus.last_event(subjects.run_event(PROJECT, final.run_id, "requested"))
    assert requested.environment == "staging"
    assert "stg_payments" in _tables(stack, "shop_staging")


async def test_a_job_a_runner_saved_takes_no_higher_role_when_a_trigger_runs_it(site):
    """Attack: ann's runner token saves a job in staging (deployer, admin only); a trigger or
    a schedule's fire comes in by the operator's door, which is admin, and ran it."""
    stack, ann, _ = site
    spec = commands.JobSpec(command=BuildCommand(select=["stg_orders"]), environment="staging")
    body = commands.JobCommand(action="save", name="sneak", job=spec)
    url = f"{stack.api_url}/v1/projects/{PROJECT}/jobs"
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url,
            data=json.dumps(msgspec.to_builtins(body)),
            headers={"Authorization": f"Bearer {ann}"},
        ) as r,
    ):
        assert r.status == 202, await r.text()
    saved = await wait_for(lambda: jobs.job_of(stack.bus, PROJECT, "sneak"), timeout=30)
    assert saved.role == "runner", saved
    final = await client.run(
        stack.bus, PROJECT, RunCommand(command=commands.JobRun(name="sneak"), trigger="relation")
    )
    assert isinstance(final, ev.RunRefused), final
    assert "'staging' lets roles deployer, admin" in final.reason and "'runner'" in final.reason


async def test_a_version_keeps_every_environment_it_declares_and_is_promoted_into_one(site):
    """The deploy records the environments the version's jetdbt.yaml declares (not only the
    default one it parsed in), so promoting it into staging is not refused as unknown."""
    stack, _, _ = site
    deployed = await stack.bus.last_event(subjects.deploy_event(PROJECT, "deployed"))
    assert deployed.environments == ["dev", "prod", "staging"], deployed.environments
    moved = await client.promote(
        stack.bus, PROJECT, commands.PromoteCommand(version=deployed.version, environment="staging")
    )
    assert isinstance(moved, ev.Promoted) and moved.slot() == "staging", moved

"""Own profiles and moved profiles, against real NATS, Postgres and dbt: a project's own
profiles.yml has no default identity, and a run whose target moved since its version's
graph was published republishes that graph."""

from __future__ import annotations

import msgspec
import pytest
import yaml
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.runs.graph import SCOPE_VERSION

from tests.support.graph_reads import project_graph
from tests.support.helpers import deploy_and_wait, wait_for, write_files

PROJECT = {
    "dbt_project.yml": "name: own\nversion: '1.0'\nconfig-version: 2\nprofile: own\n",
    "models/first.sql": "select 1 as id",
}


def _own_profile(project, path: str, kind: str = "duckdb") -> None:
    place = {"path": path} if kind == "duckdb" else {"schema_directory": path, "schema": "main"}
    outputs = {"dev": {"type": kind, "threads": 1, **place}}
    (project / "profiles.yml").write_text(
        yaml.safe_dump({"own": {"target": "dev", "outputs": outputs}})
    )


def _warehouses(settings, tmp_path, body: dict):
    file = tmp_path / "warehouses.yaml"
    file.write_text(msgspec.json.encode(body).decode())
    return msgspec.structs.replace(settings, warehouses_file=file)


async def test_an_own_profile_without_a_warehouse_with_a_relative_file_or_in_home_is_refused(
    stack, tmp_path
):
    project = tmp_path / "own"
    write_files(project, PROJECT)
    _own_profile(project, str(tmp_path / "own.duckdb"))
    refusals = {
        "profile:\n  profiles_yml: profiles.yml\n": "key 'profile.warehouse' is required",
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: lake\n": (
            "warehouse 'lake' is not configured; configured: main"
        ),
    }
    for descriptor, reason in refusals.items():
        (project / "jetdbt.yaml").write_text(descriptor)
        _, final = await client.deploy(stack.bus, project, "own")
        assert isinstance(final, ev.DeployRefused) and reason in final.reason, final
    (project / "jetdbt.yaml").write_text(
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: main\n"
    )
    _own_profile(project, "data/own.duckdb")
    _, final = await client.deploy(stack.bus, project, "own")
    assert isinstance(final, ev.DeployRefused), final
    assert "profiles.yml: own.outputs.dev.path is 'data/own.duckdb', a relative path" in (
        final.reason
    )
    # A folder that would be writable by project code inside, or holding, JETDBT_HOME (its
    # other jobs' profiles, package trees, engine environments): outside the named
    # warehouse's folder and the job's, so refused before any dbt runs.
    home = stack.settings.home.resolve()
    for path, kind in ((str(home / "runner" / "x.duckdb"), "duckdb"), (str(home.parent), "sqlite")):
        _own_profile(project, path, kind)
        _, final = await client.deploy(stack.bus, project, "own")
        assert isinstance(final, ev.DeployRefused), final
        assert "a project's own profile may write a warehouse file only there" in final.reason


@pytest.mark.dbt
async def test_an_own_profile_is_keyed_by_the_warehouse_it_names(settings, tmp_path):
    changed = _warehouses(
        settings,
        tmp_path,
        {
            "main": {"type": "duckdb", "path": str(tmp_path / "main.duckdb")},
            "lake": {"type": "duckdb", "path": str(tmp_path / "unused.duckdb")},
        },
    )
    project = tmp_path / "own"
    write_files(project, PROJECT)
    (project / "jetdbt.yaml").write_text(
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: lake\n"
    )
    _own_profile(project, str(tmp_path / "own.duckdb"))
    stack = await Stack(changed).start()
    try:
        await deploy_and_wait(stack.bus, project, "own")
        body = await project_graph(stack, "own")
        assert body["relation_root"] == "dbt://lake"
        assert {n["relation"] for n in body["nodes"]} == {"dbt://lake/main/first"}
    finally:
        await stack.stop()


@pytest.mark.dbt
async def test_a_run_whose_warehouse_schema_moved_republishes_the_versions_graph(
    settings, tmp_path
):
    project = tmp_path / "moving"
    write_files(project, PROJECT)
    duckdb = str(tmp_path / "moving.duckdb")

    async def on_schema(schema: str, step):
        changed = _warehouses(
            settings, tmp_path, {"main": {"type": "duckdb", "path": duckdb, "schema": schema}}
        )
        stack = await Stack(changed).start()
        try:
            return await step(stack)
        finally:
            await stack.stop()

    async def deploy(stack):
        deployed = await deploy_and_wait(stack.bus, project, "own")
        body = await project_graph(stack, "own")
        assert {n["relation"] for n in body["nodes"]} == {"dbt://main/before/first"}
        return deployed

    deployed = await on_schema("before", deploy)

    async def build(stack):
        final = await client.run(stack.bus, "own", RunCommand(command=BuildCommand()))
        assert isinstance(final, ev.RunFinished) and final.result.status == "passed", final
        subject = subjects.graph_event("own", SCOPE_VERSION, deployed.version)
        republished = await stack.bus.last_event(subject)
        assert "|5:after|" in republished.resolved_root

        async def moved():
            body = await project_graph(stack, "own")
            relations = {n["relation"] for n in body["nodes"]}
            return body if relations == {"dbt://main/after/first"} else None

        body = await wait_for(moved)
        assert body["version"] == deployed.version and body["scope"] == "version"
        return republished

    # The operator moves the warehouse's schema; the version is the same.
    first = await on_schema("after", build)
    # Published where it now is: the next run sees no move and republishes nothing.
    second = await on_schema("after", build)
    assert second.graph_digest == first.graph_digest and second.at == first.at

"""Engine environments against real NATS, Postgres, uv and dbt: an adapter jetdbt's own
environment does not hold is provisioned on first use, cached, locked and run warm."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import tarfile
import threading
import zipfile

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.runner.process import spawn
from jetdbt.services.runner.provision import environments
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.process.config import load

from tests.support.graph_reads import project_graph
from tests.support.helpers import closed_port, deploy_and_wait, write_files

pytestmark = pytest.mark.dbt

PROJECT = {
    "dbt_project.yml": "name: lite\nversion: '1.0'\nconfig-version: 2\nprofile: lite\n",
    "models/first.sql": "select 1 as id",
    "models/second.sql": (
        "{{ config(materialized='table') }} select id + 1 as id from {{ ref('first') }}"
    ),
}


def _with_warehouse(settings, tmp_path, output: dict, **changes):
    file = tmp_path / "warehouses.yaml"
    file.write_text(
        msgspec.json.encode({"main": {"type": "dbt_profile", "output": output}}).decode()
    )
    return msgspec.structs.replace(settings, warehouses_file=file, **changes)


async def _deploy_once(settings, tmp_path) -> ev.Event:
    """PROJECT deployed on a stack of its own with `settings`; the deploy's final event."""
    project = tmp_path / "p"
    write_files(project, PROJECT)
    stack = await Stack(settings).start()
    try:
        return (await client.deploy(stack.bus, project, "p"))[1]
    finally:
        await stack.stop()


@pytest.fixture
def sqlite_settings(settings, tmp_path):
    data = tmp_path / "sqlite"
    data.mkdir()
    output = {
        "type": "sqlite",
        "threads": 1,
        "database": "main",
        "schema": "main",
        "schemas_and_paths": {"main": str(data / "main.db")},
        "schema_directory": str(data),
    }
    # Below the runner's own dbt-core (1.11): the environment resolves its own.
    return _with_warehouse(settings, tmp_path, output, dbt_core_ceiling="1.11")


async def test_an_adapter_is_provisioned_on_first_use_and_built_warm(
    sqlite_settings, tmp_path, monkeypatch
):
    # Concurrent first uses: one install, one environment.
    both = await asyncio.gather(
        environments.ensure(sqlite_settings, "sqlite"),
        environments.ensure(sqlite_settings, "sqlite"),
    )
    assert both[0] == both[1] and both[0].version("dbt-core").startswith("1.10.")
    installed = [
        p for p in sqlite_settings.engine_environments.iterdir() if p.name.startswith("sqlite-")
    ]
    assert installed == [environments.Path(both[0].root)]

    project = tmp_path / "lite"
    write_files(project, PROJECT)
    stack = await Stack(sqlite_settings).start()
    try:
        deployed = await deploy_and_wait(stack.bus, project, "lite")
        assert deployed.adapter == "sqlite"
        assert (
            deployed.engine_version
            == both[0].version("dbt-core")
            != environments.metadata.version("dbt-core")
        )
        assert deployed.environment_lock["dbt-sqlite"] == deployed.adapter_version
        assert deployed.environment_lock["dbt-core"] == deployed.engine_version

        final = await client.run(stack.bus, "lite", RunCommand(command=BuildCommand()))
        assert isinstance(final, ev.RunFinished), final
        assert final.result.status == "passed", [n.message for n in final.result.nodes]
        assert final.result.engine_version == deployed.engine_version
        # Live node events, handed over by the environment's own warm dbt as dbt fired them.
        live = await stack.bus.last_event(subjects.node_event("lite", final.run_id, "finished"))
        assert isinstance(live, ev.NodeFinished), live

        # The index unreachable from here on: a second deploy installs nothing.
        monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{closed_port()}/simple")
        (project / "models/third.sql").write_text("select 3 as id")
        again = await deploy_and_wait(stack.bus, project, "lite")
        assert again.environment_lock == deployed.environment_lock

        # Another resolution of the same environment (another runner's, say) runs nothing
        # the deploy did not resolve: the run is refused.
        lock_file = environments.Path(both[0].root) / environments.LOCK_FILE
        kept = lock_file.read_bytes()
        other = {**msgspec.json.decode(kept), "dbt-core": "1.10.0-other"}
        lock_file.write_bytes(msgspec.json.encode(other))
        try:
            refused = await client.run(stack.bus, "lite", RunCommand(command=BuildCommand()))
        finally:
            lock_file.write_bytes(kept)
        assert isinstance(refused, ev.RunRefused), refused
        assert f"dbt-core {deployed.engine_version} (here 1.10.0-other)" in refused.reason
    finally:
        await stack.stop()


async def test_an_adapter_outside_the_allowlist_is_refused_naming_the_setting(settings, tmp_path):
    changed = _with_warehouse(settings, tmp_path, {"type": "madeup", "threads": 1})
    final = await _deploy_once(changed, tmp_path)
    assert isinstance(final, ev.DeployRefused), final
    assert "adapter 'madeup'" in final.reason and "JETDBT_EXTRA_ADAPTERS" in final.reason


class _Listener:
    """A loopback port that accepts and drops every connection, counting them: an index
    that answers nothing, and a witness of how often the resolver tried it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.count = self.sock.getsockname()[1], 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.count += 1
                conn.close()


async def test_a_failed_install_refuses_the_deploy_leaves_nothing_and_is_remembered(
    settings, tmp_path, monkeypatch
):
    """The operator's index (pip's setting, with credentials) answers nothing: the deploy is
    refused naming the resolver's message, nothing half-installed is left, the credentials
    are nowhere in the reason, and a second deploy gets the same reason without the
    resolver trying the index again."""
    index = _Listener()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://ci:s3cret-tok@127.0.0.1:{index.port}/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    for name in ("PIP_FIND_LINKS", "UV_FIND_LINKS", "UV_INDEX_URL", "UV_DEFAULT_INDEX"):
        monkeypatch.delenv(name, raising=False)
    isolated = tmp_path / "environments"
    changed = _with_warehouse(
        settings, tmp_path, {"type": "mysql", "server": "127.0.0.1"}, environments_dir=isolated
    )
    final = await _deploy_once(changed, tmp_path)
    assert isinstance(final, ev.DeployRefused), final
    assert "adapter 'mysql': installing dbt-mysql failed; the resolver said:" in final.reason
    assert "127.0.0.1" in final.reason and "s3cret-tok" not in final.reason
    assert [p.name for p in isolated.iterdir() if not p.name.endswith((".lock", ".failed"))] == []
    tried = index.count
    assert tried > 0
    again = await _deploy_once(changed, tmp_path / "again")
    assert isinstance(again, ev.DeployRefused), again
    assert "installing dbt-mysql failed" in again.reason and "not tried again" in again.reason
    assert index.count == tried
    index.sock.close()


async def test_mysql_is_refused_with_the_resolvers_whole_explanation(tmp_path):
    """dbt-mysql's newest release pins dbt-core 1.7: the refusal carries uv's explanation
    from its first line to its conclusion (122 lines), not only its last few."""
    settings = load({"JETDBT_HOME": str(tmp_path / "home")})
    with pytest.raises(environments.EnvironmentUnavailable) as refused:
        await environments.ensure(settings, "mysql")
    said = str(refused.value).split("the resolver said:\n", 1)[1]
    assert said.startswith("error: No solution found when resolving dependencies\n  cause:")
    assert "dbt-mysql>=1.7.0 depends on dbt-core>=1.7.0,<1.8" in said
    assert said.endswith("your requirements are unsatisfiable.") and "lines left out" not in said


def _index_of_an_sdist(folder, marker):
    """A find-links folder: a dbt-core wheel (metadata only) and dbt-evil as an sdist only,
    whose build backend writes `marker` when anything builds it."""
    folder.mkdir()
    info = "dbt_core-1.10.0.dist-info"
    with zipfile.ZipFile(folder / "dbt_core-1.10.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: dbt-core\nVersion: 1.10.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n[project]\nname = "dbt-evil"\nversion = "1.0"\n',
        "backend.py": f"open({str(marker)!r}, 'w').write('built outside any sandbox')\n",
        "PKG-INFO": "Metadata-Version: 2.1\nName: dbt-evil\nVersion: 1.0\n",
    }
    with tarfile.open(folder / "dbt_evil-1.0.tar.gz", "w:gz") as sdist:
        for name, text in files.items():
            entry = tarfile.TarInfo(f"dbt_evil-1.0/{name}")
            entry.size = len(text.encode())
            sdist.addfile(entry, io.BytesIO(text.encode()))


async def test_an_adapter_with_no_wheel_is_refused_and_its_build_code_never_runs(
    tmp_path, monkeypatch
):
    """Installs are wheels only: an adapter published as an sdist is refused with uv's reason,
    and its build backend (code that would run as the runner, outside any sandbox) never
    runs."""
    marker = tmp_path / "built"
    _index_of_an_sdist(tmp_path / "links", marker)
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(tmp_path / "links"))
    settings = load({"JETDBT_HOME": str(tmp_path / "home"), "JETDBT_EXTRA_ADAPTERS": "evil"})
    with pytest.raises(environments.EnvironmentUnavailable) as refused:
        await environments.ensure(settings, "evil")
    said = str(refused.value).split("the resolver said:\n", 1)[1]
    assert said.startswith("error: No solution found"), said
    assert "dbt-evil==1.0 has no usable wheels" in said and "--no-build" in said
    assert not marker.exists()
    leftovers = settings.engine_environments.iterdir()
    assert [p.name for p in leftovers if not p.name.endswith((".lock", ".failed"))] == []


async def test_a_snowflake_project_deploys_without_a_connection(settings, tmp_path):
    """dbt parse needs no connection: the project deploys, its relations keyed under the
    warehouse's schema; its build fails with the adapter's own connection error."""
    file = tmp_path / "warehouses.yaml"
    connection = {"account": "jetdbt-test", "user": "ana", "password": "$env:HOME",
                  "database": "analytics", "warehouse": "compute_wh", "schema": "marts",
                  "login_timeout": 5, "connect_retries": 0}  # fmt: skip
    file.write_text(
        msgspec.json.encode({"snow": {"type": "snowflake", "connection": connection}}).decode()
    )
    project = tmp_path / "p"
    write_files(project, {**PROJECT, "jetdbt.yaml": "profile:\n  warehouse: snow\n"})
    stack = await Stack(msgspec.structs.replace(settings, warehouses_file=file)).start()
    try:
        deployed = await deploy_and_wait(stack.bus, project, "p")
        assert deployed.adapter == "snowflake" and "dbt-snowflake" in deployed.environment_lock
        body = await project_graph(stack, "p")
        assert body["relation_root"] == "dbt://snow"
        relations = {n["name"]: n["relation"] for n in body["nodes"]}
        assert relations == {"first": "dbt://snow/marts/first", "second": "dbt://snow/marts/second"}
        final = await client.run(stack.bus, "p", RunCommand(command=BuildCommand()))
        assert isinstance(final, ev.RunFinished) and final.result.status == "failed"
        assert "Could not connect to Snowflake backend" in final.result.error
    finally:
        await stack.stop()


async def test_an_environments_warm_dbt_stops_once_idle(sqlite_settings):
    environment = await environments.ensure(sqlite_settings, "sqlite")
    environment = msgspec.structs.replace(environment, idle_seconds=0)
    read_fd, write_fd = os.pipe()
    try:
        child = await spawn.spawn(["true"], "/", {}, write_fd, exec_=["/bin/true"],
                                  environment=environment)  # fmt: skip
    finally:
        os.close(write_fd)
    assert await child.wait() == 0
    os.close(read_fd)
    server = spawn._engines[environment.root]
    assert server.alive()
    # The next invocation anywhere else stops the idle one.
    read_fd, write_fd = os.pipe()
    try:
        other = await spawn.spawn(["true"], "/", {}, write_fd, exec_=["/bin/true"])
    finally:
        os.close(write_fd)
    assert await other.wait() == 0
    os.close(read_fd)
    assert environment.root not in spawn._engines and not server.alive()

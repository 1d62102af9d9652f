"""Named warehouses and credentials, end to end with real dbt; secrets never leave the runner."""

from __future__ import annotations

import asyncio
import base64
import io
import re
import uuid

import asyncpg
import msgspec
import pytest
import yaml
from jetdbt.services.cli import client
from jetdbt.services.runner.setup.own_database import OwnDatabase
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.process import logging as jlog

from tests.support.helpers import (
    collect_everything,
    deploy_and_wait,
    duckdb_tables,
    jetdbt,
    pg_parts,
    wait_for,
)
from tests.support.hook_receiver import Receiver

CANARY = "canary-" + uuid.uuid4().hex
# Models whose Postgres error quotes the secret in every spelling the masker knows: as is,
# reversed, upper-cased, spaced by dashes, split by a concatenation, as hex, and inside a
# longer value as base64 (which Postgres wraps at 76 characters).
_SECRET = "'{{ env_var(\"SHOP_PG_PASSWORD\") }}'"
_WRAPPED = f"'a longer value, so that its base64 wraps: ' || {_SECRET}"
LEAKS = {
    "leak_plain": _SECRET,
    "leak_reversed": f"reverse({_SECRET})",
    "leak_upper": f"upper({_SECRET})",
    "leak_spaced": f"regexp_replace({_SECRET}, '(.)', '\\1-', 'g')",
    "leak_split": f"left({_SECRET}, 20) || ''' || ''' || substr({_SECRET}, 21)",
    "leak_hex": f"encode(convert_to({_SECRET}, 'UTF8'), 'hex')",
    "leak_base64": f"encode(convert_to({_WRAPPED}, 'UTF8'), 'base64')",
}
_WRAPPED_VALUE = f"a longer value, so that its base64 wraps: {CANARY}".encode()


async def _deploy_and_build(stack, path, project="jaffle_shop"):
    await deploy_and_wait(stack.bus, path, project)
    final = await client.run(stack.bus, project, RunCommand(command=BuildCommand()))
    assert isinstance(final, ev.RunFinished), final
    return final


async def _with_stack(settings, tmp_path, warehouses: dict, body):
    file = tmp_path / "warehouses.yaml"
    file.write_text(yaml.safe_dump({"warehouses": warehouses}))
    st = await Stack(msgspec.structs.replace(settings, warehouses_file=file)).start()
    try:
        return await body(st)
    finally:
        await st.stop()


async def _pg_tables(pg_url: str, schema: str) -> set[str]:
    conn = await asyncpg.connect(pg_url)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
    finally:
        await conn.close()
    return {r["table_name"] for r in rows}


async def _drop_schema(pg_url: str, schema: str) -> None:
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def _flat(data: bytes) -> bytes:
    """Letters and digits alone, JSON's line breaks left out: a spelling spaced, split or
    wrapped reads as one word here."""
    return re.sub(rb"(?:\\)+n|[^A-Za-z0-9]", b"", data)


def _assert_no_canary(found: list[bytes], logs: str) -> None:
    letters = _flat(CANARY.encode()).lower()
    wrapped = base64.b64encode(_WRAPPED_VALUE).decode()
    spellings = {
        "letters": letters, "reversed": letters[::-1], "hex": CANARY.encode().hex().encode(),
        "base64": _flat(wrapped[-len(CANARY) * 4 // 3 + 4 : -4].encode()),
    }  # fmt: skip
    for blob in [*found, logs.encode()]:
        flat = _flat(blob)
        left = [k for k, v in spellings.items() if v in flat.lower() or v in flat]
        assert not left, (left, blob[:300])


@pytest.mark.dbt
async def test_named_duckdb_warehouse(settings, tmp_path, project_copy):
    path = tmp_path / "analytics.duckdb"
    (project_copy / "jetdbt.yaml").write_text("profile:\n  warehouse: analytics\n")

    async def body(st):
        final = await _deploy_and_build(st, project_copy)
        assert final.result.status == "passed"
        assert (final.result.warehouse, final.result.target) == ("analytics", "prod")
        assert final.result.engine_version.startswith("1.")

    await _with_stack(
        settings,
        tmp_path,
        {"analytics": {"type": "duckdb", "path": str(path), "target": "prod"}},
        body,
    )
    assert {"orders", "customers"} <= duckdb_tables(path)


@pytest.fixture
def captured_logs():
    buffer = io.StringIO()
    jlog.configure("debug", stream=buffer)
    yield buffer
    jlog.configure("warning")


@pytest.mark.dbt
async def test_named_postgres_warehouse_with_env_reference(
    settings, tmp_path, project_copy, warehouse_pg_url, monkeypatch, captured_logs
):
    monkeypatch.setenv("JETDBT_TEST_PG_PASSWORD", CANARY)
    schema = f"wh_{uuid.uuid4().hex[:10]}"
    parts = pg_parts(warehouse_pg_url)
    (project_copy / "jetdbt.yaml").write_text("profile:\n  warehouse: pg\n")
    warehouse = {
        "type": "postgres",
        **parts,
        "schema": schema,
        "password": "$env:JETDBT_TEST_PG_PASSWORD",
    }

    async def body(st):
        final = await _deploy_and_build(st, project_copy)
        assert final.result.status == "passed", final.result.error
        assert final.result.warehouse == "pg"
        await asyncio.sleep(0.5)  # let the projectors fold the last events
        return await collect_everything(st)

    try:
        found = await _with_stack(settings, tmp_path, {"pg": warehouse}, body)
        assert {"orders", "customers", "stg_orders"} <= await _pg_tables(warehouse_pg_url, schema)
    finally:
        await _drop_schema(warehouse_pg_url, schema)
    _assert_no_canary(found, captured_logs.getvalue())


@pytest.mark.dbt
async def test_own_profiles_yml_with_password_from_descriptor_env(
    settings, tmp_path, project_copy, warehouse_pg_url, monkeypatch, captured_logs
):
    """The canary reaches dbt only through a reference the operator allows, and the models
    that quote it (in every spelling of LEAKS) in their Postgres errors fail with the
    secret masked in every event, log line, blob, projection row, runner log and the
    webhook's body."""
    monkeypatch.setenv("JETDBT_TEST_SECRET", CANARY)
    settings = msgspec.structs.replace(
        settings, env_references=("JETDBT_TEST_*",), webhook_hosts=("127.0.0.1",)
    )
    for name, spelled in LEAKS.items():
        (project_copy / "models" / f"{name}.sql").write_text(
            f"{{{{ config(materialized='table') }}}}\nselect cast({spelled} as integer) as leaked"
        )
    schema = f"own_{uuid.uuid4().hex[:10]}"
    parts = pg_parts(warehouse_pg_url)
    profiles = {
        "jaffle_shop": {
            "target": "dev",
            "outputs": {
                "dev": {
                    "type": "postgres",
                    "host": parts["host"],
                    "port": parts["port"],
                    "user": parts["user"],
                    "dbname": parts["dbname"],
                    "schema": schema,
                    "threads": 2,
                    "password": "{{ env_var('SHOP_PG_PASSWORD') }}",
                }
            },
        }
    }
    (project_copy / "profiles.yml").write_text(yaml.safe_dump(profiles))
    (project_copy / "jetdbt.yaml").write_text(
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: pg\n"
        "env:\n  SHOP_PG_PASSWORD: $env:JETDBT_TEST_SECRET\n"
    )

    receiver = Receiver(200)

    async def body(st):
        await deploy_and_wait(st.bus, project_copy, "jaffle_shop")
        added = await jetdbt(st, "hook", "add", "pager", "--project", "jaffle_shop",
                             "--url", await receiver.start(), "--on", "failure")  # fmt: skip
        assert added.returncode == 0, added.stderr
        build = BuildCommand(exclude=list(LEAKS))
        final = await client.run(st.bus, "jaffle_shop", RunCommand(command=build))
        assert final.result.status == "passed", final.result.error
        assert final.result.target == "dev"
        leaky = BuildCommand(select=list(LEAKS))
        failed = await client.run(st.bus, "jaffle_shop", RunCommand(command=leaky))
        messages = {n.name: n.message or "" for n in failed.result.nodes}
        assert set(messages) == set(LEAKS) and all("****" in m for m in messages.values()), messages
        # The webhook's body is made of the masked result: each failed node's message.
        [(_, sent)] = await wait_for(lambda: _got(receiver), timeout=30)
        told = msgspec.json.decode(sent)["run"]["failed_nodes"]
        assert len(told) == len(LEAKS) and all("****" in n["message"] for n in told), told
        await asyncio.sleep(0.5)
        return [*await collect_everything(st), sent]

    try:
        found = await _with_stack(
            settings,
            tmp_path,
            {"pg": {"type": "postgres", **parts, "schema": "unused"}},  # the profile's server
            body,
        )
        assert {"orders", "customers"} <= await _pg_tables(warehouse_pg_url, schema)
    finally:
        await _drop_schema(warehouse_pg_url, schema)
        await receiver.runner.cleanup()
    _assert_no_canary(found, captured_logs.getvalue())


async def _got(receiver: Receiver) -> list:
    return receiver.got


async def test_unknown_warehouse_and_unconfigured_engine_are_refused(stack, project_copy):
    (project_copy / "jetdbt.yaml").write_text("profile:\n  warehouse: prod\n")
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert isinstance(refused, ev.DeployRefused)
    assert "warehouse 'prod' is not configured; configured: main" in refused.reason

    (project_copy / "jetdbt.yaml").write_text("engine: fusion\n")
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert isinstance(refused, ev.DeployRefused)
    assert "engine 'fusion' is not installed" in refused.reason
    assert "JETDBT_ENGINES_DIR" in refused.reason and "nothing is downloaded" in refused.reason

    (project_copy / "jetdbt.yaml").write_text("threads: 0\n")
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert "key 'threads'" in refused.reason


@pytest.mark.dbt
async def test_a_configured_engine_binary_is_the_one_that_runs(settings, tmp_path, project_copy):
    """fusion runs only from a binary the operator placed; here a shim that says it ran (in
    the run's log: a sandboxed engine writes nothing outside its job). The project names no
    engine: the operator's JETDBT_DEFAULT_ENGINE chooses it."""
    import sys

    engines = tmp_path / "engines"
    (engines / "fusion").mkdir(parents=True)
    marker = "the-fusion-shim-ran-" + uuid.uuid4().hex
    shim = engines / "fusion" / "dbt"
    shim.write_text(f"#!/bin/sh\necho {marker}\nexec '{sys.executable}' -m dbt.cli.main \"$@\"\n")
    shim.chmod(0o755)
    (project_copy / "jetdbt.yaml").unlink(missing_ok=True)
    chosen = msgspec.structs.replace(settings, engines_dir=engines, default_engine="fusion")
    st = await Stack(chosen).start()
    try:
        final = await _deploy_and_build(st, project_copy)
        found = await collect_everything(st)
    finally:
        await st.stop()
    assert final.result.status == "passed" and final.result.engine == "fusion"
    assert any(marker.encode() in blob for blob in found)


async def test_a_project_reads_only_the_environment_names_the_operator_allows(
    stack, project_copy, monkeypatch
):
    monkeypatch.setenv("JETDBT_TEST_SECRET", CANARY)
    (project_copy / "jetdbt.yaml").write_text("env:\n  LEAK: $env:JETDBT_TEST_SECRET\n")
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert isinstance(refused, ev.DeployRefused), refused
    assert "env.LEAK refers to $env:JETDBT_TEST_SECRET, which projects may not read" in (
        refused.reason
    )
    assert "JETDBT_ENV_REFERENCES" in refused.reason and CANARY not in refused.reason


def test_profile_name_is_rendered_against_the_run_environment():
    from jetdbt.services.runner.setup.plan import PlanRefused, _render_profile_name

    doc = {"name": "p", "profile": "{{ env_var('SHOP_PROFILE', 'fallback') }}"}
    assert _render_profile_name(doc, {"SHOP_PROFILE": "shop"}) == "shop"
    assert _render_profile_name(doc, {}) == "fallback"
    with pytest.raises(PlanRefused, match="env_var\\('NOPE'\\)"):
        _render_profile_name({"profile": "{{ env_var('NOPE') }}"}, {})


def test_packages_install_path_is_rendered_and_kept_inside_the_project():
    from jetdbt.services.runner.setup.plan import PlanRefused, _packages_path

    assert _packages_path({}, {}) == "dbt_packages"
    setting = {"packages-install-path": "{{ env_var('PKGS', 'vendor') }}/"}
    assert _packages_path(setting, {}) == "vendor"
    assert _packages_path(setting, {"PKGS": "a/b"}) == "a/b"
    for outside in ("../elsewhere", "/abs"):
        with pytest.raises(PlanRefused, match="must be a folder inside the project"):
            _packages_path({"packages-install-path": outside}, {})


async def test_a_profile_name_cannot_read_the_runners_environment(stack, project_copy, monkeypatch):
    """A profile rendered with env_var() once echoed a runner secret in a deploy refusal:
    it is rendered against dbt's own environment, where the runner's is not."""
    monkeypatch.setenv("JETDBT_TEST_SECRET", CANARY)
    project = project_copy / "dbt_project.yml"
    project.write_text(
        project.read_text().replace(
            "profile: jaffle_shop", "profile: \"{{ env_var('JETDBT_TEST_SECRET') }}\""
        )
    )
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert isinstance(refused, ev.DeployRefused), refused
    assert "env_var('JETDBT_TEST_SECRET'), which is not set" in refused.reason
    assert CANARY not in refused.reason


def test_a_project_reads_no_runner_variable_the_operator_does_not_allow():
    """`$var:` from a project is gated like `$env:`: another team's secret is not its own."""
    from jetdbt.services.runner.setup.secrets import Resolver, UnresolvedReference

    variables = {"team_b/warehouse_password": CANARY}
    with pytest.raises(UnresolvedReference, match="projects may not read"):
        Resolver(variables).resolve("$var:team_b/warehouse_password", "env.X", from_project=True)
    allowed = Resolver(variables, project_env=("team_b/*",))
    assert allowed.resolve("$var:team_b/warehouse_password", "env.X", from_project=True) == CANARY


async def test_a_warehouse_on_jetdbts_own_database_is_refused_at_start(settings, tmp_path):
    """A Postgres warehouse on the very database the stack keeps its projections in (the
    attack: a project's SQL read jetdbt.runs and failed another team's run, as superuser)."""
    parts = pg_parts(settings.database_url)
    pgwh = {"type": "postgres", **parts, "host": parts["host"] + "/", "schema": "beta"}
    with pytest.raises(OwnDatabase) as refused:
        await _with_stack(settings, tmp_path, {"pgwh": pgwh}, lambda st: None)
    assert "warehouse 'pgwh' reaches jetdbt's own database server" in str(refused.value)
    assert f"(socket {parts['host']}/.s.PGSQL." in str(refused.value)


async def test_a_projects_own_profile_on_jetdbts_own_database_is_refused(stack, project_copy):
    """The same attack through a project's own profiles.yml, which no start check sees, on
    another database of the same server (template1, as the superuser of its trust login):
    its deploy is refused before dbt runs, naming jetdbt's server."""
    parts = pg_parts(stack.settings.database_url)
    output = {"type": "postgres", **parts, "dbname": "template1", "user": "postgres"}
    output |= {"schema": "beta", "threads": 1, "password": ""}
    profiles = {"jaffle_shop": {"target": "x", "outputs": {"x": output}}}
    (project_copy / "profiles.yml").write_text(yaml.safe_dump(profiles))
    (project_copy / "jetdbt.yaml").write_text(
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: main\n"
    )
    _, refused = await client.deploy(stack.bus, project_copy, "jaffle_shop")
    assert isinstance(refused, ev.DeployRefused), refused
    assert "this project's profile reaches jetdbt's own database server" in refused.reason
    assert f"(socket {parts['host']}/.s.PGSQL." in refused.reason


async def test_a_projects_own_profile_connects_only_to_the_warehouse_it_names(
    settings, tmp_path, project_copy, warehouse_pg_url
):
    """A team is granted a warehouse by name: a project's own profiles.yml that names it but
    connects elsewhere (another server, a DuckDB file outside it) is refused at deploy,
    naming the warehouse and where the profile points."""
    parts = pg_parts(warehouse_pg_url)
    pg = {"type": "postgres", **parts, "schema": "s"}
    main = {"type": "duckdb", "path": str(tmp_path / "main" / "w.duckdb")}
    elsewhere = tmp_path / "elsewhere"
    attacks = [
        ("main", {**pg, "threads": 1}, f"connects to socket {parts['host']}/.s.PGSQL."),
        ("pg", {**pg, "host": "192.0.2.1", "threads": 1}, "connects to 192.0.2.1:"),
        ("pg", {"type": "duckdb", "path": str(elsewhere / "x.duckdb")}, f"lies in {elsewhere}"),
    ]

    async def body(st):
        said = []
        for warehouse, output, where in attacks:
            profiles = {"jaffle_shop": {"target": "x", "outputs": {"x": output}}}
            (project_copy / "profiles.yml").write_text(yaml.safe_dump(profiles))
            (project_copy / "jetdbt.yaml").write_text(
                f"profile:\n  profiles_yml: profiles.yml\n  warehouse: {warehouse}\n"
            )
            _, refused = await client.deploy(st.bus, project_copy, "jaffle_shop")
            assert isinstance(refused, ev.DeployRefused), refused
            assert where in refused.reason and f"warehouse {warehouse!r}" in refused.reason
            said.append(refused.reason)
        return said

    said = await _with_stack(settings, tmp_path, {"pg": pg, "main": main}, body)
    assert "not to warehouse 'main' (a file warehouse)" in said[0], said[0]
    assert f"not to warehouse 'pg' (socket {parts['host']}/.s.PGSQL." in said[1], said[1]
    assert not elsewhere.exists()

"""A run's own Postgres login (`credentials: per_run`), against real NATS, Postgres and dbt:
a build logs in as a role of its own that acts as its environment's writer and is gone
after the run; a show's role only reads; the operator's password stays in the runner."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
import yaml

from services.cli import client
from services.runner.setup import run_credentials, workspace
from services.runner.setup.secrets import Resolver
from services.runner.setup.warehouses import load_warehouses
from shared import events as ev
from shared.commands import BuildCommand, CancelCommand, RunCommand, ShowCommand
from shared.environments import Environment
from tests.support.helpers import (
    collect_everything,
    deploy_and_wait,
    pg_parts,
    wait_for,
    write_files,
)
from tests.support.shared_stack import shared_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

CANARY = "canary-" + uuid.uuid4().hex  # the operator's long-lived password
SCHEMA = "analytics"
HOLD = 4242  # an advisory lock the test holds to keep the `held` model running
PROJECT = {
    "dbt_project.yml": "name: creds\nversion: '1.0'\nconfig-version: 2\nprofile: creds\n",
    "jetdbt.yaml": "profile:\n  warehouse: pg\n",
    "seeds/numbers.csv": "n\n1\n2\n",
    # current_user is the role dbt sets on each connection; session_user the login.
    "models/who.sql": "{{ config(materialized='table') }}\n"
    "select current_user::text as acting, session_user::text as login,"
    " (select count(*) from {{ ref('numbers') }}) as n",
    "models/held.sql": "{{ config(materialized='table') }}\n"
    f"select 1 as x from (select pg_advisory_xact_lock_shared({HOLD})) l",
    # A model that tries to write (as whoever runs it); builds leave it out.
    "models/probe.sql": f"select public.try_write('{SCHEMA}') as wrote",
}
TRY_WRITE = """
CREATE FUNCTION public.try_write(s text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE TABLE %I.probe_wrote (x int)', s);
  RETURN 1;
END $$
"""
BUILD = BuildCommand(exclude=["probe"])


async def _admin(url: str, database: str | None = None) -> asyncpg.Connection:
    parts = pg_parts(url)
    return await asyncpg.connect(
        host=parts["host"],
        port=parts["port"],
        user=parts["user"],
        database=database or parts["dbname"],
    )


async def _roles(conn: asyncpg.Connection, prefix: str) -> dict[str, object]:
    rows = await conn.fetch(
        "SELECT rolname, rolvaliduntil FROM pg_roles WHERE starts_with(rolname, $1)", prefix
    )
    return {r["rolname"]: r["rolvaliduntil"] for r in rows}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def warehouse(tmp_path_factory, warehouse_pg_url):
    """A database of its own on the warehouses' Postgres, as the warehouse `pg` (per_run), with
    two run roles left behind by a dead runner: one expired, one still valid."""
    database = f"wh_{uuid.uuid4().hex[:10]}"
    expired, alive = (f"{run_credentials.RUN_PREFIX}left_{uuid.uuid4().hex[:8]}" for _ in "ab")
    conn = await _admin(warehouse_pg_url)
    before = await _roles(conn, "jetdbt_")
    await conn.execute(f'CREATE DATABASE "{database}"')
    await conn.execute(f"CREATE ROLE {expired} LOGIN VALID UNTIL '2000-01-01'")
    await conn.execute(f"CREATE ROLE {alive} LOGIN VALID UNTIL 'infinity'")
    wh_conn = await _admin(warehouse_pg_url, database)
    await wh_conn.execute(TRY_WRITE)
    await wh_conn.close()
    folder = tmp_path_factory.mktemp("creds")
    file = folder / "warehouses.yaml"
    body = {
        **pg_parts(warehouse_pg_url),
        "type": "postgres",
        "dbname": database,
        "schema": SCHEMA,
        "password": "$env:JETDBT_TEST_PG_PASSWORD",
        "credentials": "per_run",
    }
    file.write_text(yaml.safe_dump({"warehouses": {"pg": body}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JETDBT_TEST_PG_PASSWORD", CANARY)
        yield {"file": file, "database": database, "expired": expired, "alive": alive}
    await conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
    for role in set(await _roles(conn, "jetdbt_")) - set(before):
        await conn.execute(f'DROP ROLE "{role}"')
    await conn.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory, pg_url, environments_cache, warehouse):
    extra = {"JETDBT_WAREHOUSES": str(warehouse["file"])}
    folder = tmp_path_factory.mktemp("stack")
    async with shared_stack(folder, pg_url, environments_cache, extra) as st:
        project = folder / "creds"
        write_files(project, PROJECT)
        await deploy_and_wait(st.bus, project, "creds")
        yield st


async def _run(stack, command) -> ev.RunFinished:
    final = await client.run(stack.bus, "creds", RunCommand(command=command))
    assert isinstance(final, ev.RunFinished), final
    return final


async def _held(admin: asyncpg.Connection) -> str:
    """The login of the build held at the `held` model, once it waits there."""

    async def held_by() -> str | None:
        return await admin.fetchval(
            "SELECT usename FROM pg_stat_activity WHERE query LIKE '%xact_lock_shared%'"
            " AND wait_event_type = 'Lock'"
        )

    return await wait_for(held_by, timeout=120)


@pytest.mark.dbt
async def test_a_build_logs_in_as_a_role_of_its_own_gone_after_the_run(
    stack, warehouse, warehouse_pg_url
):
    admin = await _admin(warehouse_pg_url, warehouse["database"])
    try:
        first = await _run(stack, BUILD)
        assert first.result.status == "passed", first.result.error
        # The second build replaces what the first one's role built, and is held open.
        await admin.execute("SELECT pg_advisory_lock($1)", HOLD)
        run_id = uuid.uuid4().hex
        command = RunCommand(command=BUILD, run_id=run_id)
        second = asyncio.create_task(client.run(stack.bus, "creds", command))
        login = await _held(admin)
        environment = Environment(
            warehouse="pg", target="main", schema=SCHEMA, database=warehouse["database"]
        )
        assert login == run_credentials.run_role(environment.key())
        until = (await _roles(admin, login))[login]
        left = (until - await admin.fetchval("SELECT now()")).total_seconds()
        assert 0 < left <= stack.settings.run_timeout_seconds, left
        job = workspace.job_root(stack.settings.runner_cache, f"{run_id}.1")
        profile = yaml.safe_load((job / "profiles" / "profiles.yml").read_text())
        output = profile["creds"]["outputs"]["main"]
        assert output["user"] == login and output["password"] not in ("", CANARY)
        writer, reader = run_credentials.group_roles(environment)
        assert "role" not in output  # the login's own setting: dbt's profile stays the same
        await admin.execute("SELECT pg_advisory_unlock($1)", HOLD)
        final = await second
        assert final.result.status == "passed", final.result.error

        row = await admin.fetchrow(f"SELECT acting, login, n FROM {SCHEMA}.who")
        assert dict(row) == {"acting": writer, "login": login, "n": 2}
        owners = await admin.fetch(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = $1", SCHEMA
        )
        assert [r["tableowner"] for r in owners] == [writer]
        assert await _roles(admin, login) == {}
    finally:
        await admin.close()
    found = await collect_everything(stack)
    assert not [blob[:200] for blob in found if CANARY.encode() in blob]


@pytest.mark.dbt
async def test_a_shows_role_only_reads(stack, warehouse, warehouse_pg_url):
    show = RunCommand(command=ShowCommand(select=["probe"]))
    final = await client.run(stack.bus, "creds", show)
    assert final.result.status == "failed"
    said = " ".join([final.result.error or "", *(n.message or "" for n in final.result.nodes)])
    assert f"permission denied for schema {SCHEMA}" in said, said
    shown = await client.run(stack.bus, "creds", RunCommand(command=ShowCommand(select=["who"])))
    assert shown.result.status == "passed" and len(shown.result.preview) == 1, shown.result
    admin = await _admin(warehouse_pg_url, warehouse["database"])
    try:
        assert not await admin.fetchval("SELECT to_regclass($1)", f"{SCHEMA}.probe_wrote")
        left = set(await _roles(admin, run_credentials.RUN_PREFIX))
        assert not left - {warehouse["alive"], warehouse["expired"]}, left  # the show's gone
    finally:
        await admin.close()


@pytest.mark.dbt
async def test_a_cancelled_runs_role_is_gone_with_its_sessions(stack, warehouse, warehouse_pg_url):
    """dbt killed mid-query leaves a session waiting on the server: it is ended with the
    role, before the run's end is published."""
    admin = await _admin(warehouse_pg_url, warehouse["database"])
    try:
        await admin.execute("SELECT pg_advisory_lock($1)", HOLD)
        run_id = uuid.uuid4().hex
        command = RunCommand(command=BUILD, run_id=run_id)
        build = asyncio.create_task(client.run(stack.bus, "creds", command))
        login = await _held(admin)
        by = client.principal()
        cancel = CancelCommand(run_id=run_id, requested_by=by)
        await stack.bus.publish_command("cancel", "creds", cancel, run_id, principal=by)
        final = await build
        assert final.result.status == "cancelled", final.result
        assert await _roles(admin, login) == {}
        sessions = "SELECT count(*) FROM pg_stat_activity WHERE usename = $1"
        assert await admin.fetchval(sessions, login) == 0
    finally:
        await admin.close()


async def test_expired_run_roles_are_swept_when_a_runner_starts(stack, warehouse, warehouse_pg_url):
    admin = await _admin(warehouse_pg_url)
    try:

        async def swept():
            return warehouse["expired"] not in await _roles(admin, warehouse["expired"])

        await wait_for(swept, timeout=30)
        assert warehouse["alive"] in await _roles(admin, warehouse["alive"])
    finally:
        await admin.close()


async def test_a_later_holder_replaces_a_dead_ones_role_and_only_its_own_end_drops_it(
    warehouse, warehouse_pg_url
):
    """A runner that died left its run's role; the next run of the scope makes it anew,
    and the dead attempt's end (fenced off, still finishing) leaves the new one alone. A
    reading command's role is a member of its environment's reader role alone."""
    wh = load_warehouses(warehouse["file"], Path("unused.duckdb"))["pg"]
    place = Environment(warehouse="pg", target="main", schema="reads", database=wh.dbname)
    issued = [
        await run_credentials.issue(
            wh, Resolver(), [place], scope="reads", holder=f"attempt {n}", writes=False,
            seconds=60,
        )
        for n in (1, 2)
    ]  # fmt: skip
    name = run_credentials.run_role("reads")
    admin = await _admin(warehouse_pg_url, warehouse["database"])
    try:
        groups = await admin.fetch(
            "SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid"
            " WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = $1)",
            name,
        )
        writer, reader = run_credentials.group_roles(place)
        assert [g["rolname"] for g in groups] == [reader] == [issued[1].role]
        await run_credentials.drop(wh, Resolver(), issued[0])
        assert set(await _roles(admin, name)) == {name}
        await run_credentials.drop(wh, Resolver(), issued[1])
        assert await _roles(admin, name) == {}
    finally:
        await admin.close()

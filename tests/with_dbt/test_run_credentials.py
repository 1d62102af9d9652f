"""A run's own Postgres login (`credentials: per_run`), against real NATS, Postgres and dbt:
a build logs in as a role of its own that acts as its environment's writer and is gone
after the run; a show's role only reads; the operator's password stays in the runner."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import asyncpg
import msgspec
import pytest
import pytest_asyncio
import yaml
from jetdbt.services.cli import client
from jetdbt.services.runner.setup import run_credentials, workspace
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import load_warehouses
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, CancelCommand, RunCommand, ShowCommand
from jetdbt.shared.project.environments import Environment

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


async def _login(url: str, database: str, login: run_credentials.Login) -> asyncpg.Connection:
    """A session of a run's own login, as its dbt or anything its code runs would open."""
    parts = pg_parts(url)
    return await asyncpg.connect(
        host=parts["host"],
        port=parts["port"],
        user=login.user,
        password=login.password,
        database=database,
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
            wh, Resolver(), [place], scope="reads", holder=f"attempt {n}", team="t", writes=False,
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


async def test_a_run_holding_the_old_advisory_lock_keeps_no_other_run_from_its_login(
    warehouse, warehouse_pg_url
):
    """Any role can take an advisory lock: a model holding the one logins were once made
    under held every other run back. The lock is now a table a run's role cannot lock."""
    wh = load_warehouses(warehouse["file"], Path("unused.duckdb"))["pg"]
    place = Environment(warehouse="pg", target="main", schema="locks", database=wh.dbname)
    resolver = Resolver()

    async def issue(scope: str) -> run_credentials.Login:
        return await run_credentials.issue(
            wh, resolver, [place], scope=scope, holder=scope, team="t", writes=True, seconds=60
        )

    first = await issue("locks-a")
    held = await _login(warehouse_pg_url, warehouse["database"], first)
    try:
        await held.execute("SELECT pg_advisory_lock(hashtext('jetdbt run credentials'))")
        second = await asyncio.wait_for(issue("locks-b"), 20)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with held.transaction():
                await held.execute(f"LOCK TABLE {run_credentials.LOCK_SCHEMA}.lock")
    finally:
        await held.close()
    for login in (first, second):
        await run_credentials.drop(wh, resolver, login)
    # Still masked once dropped: the run's artifacts and kept log go out after its drop.
    assert resolver.masker.mask(first.password) == "****"


async def test_a_dropped_login_cannot_log_in_again_while_it_is_dropped(warehouse, warehouse_pg_url):
    """A run can set its own login's password and log in anew while its role is dropped:
    the role can no longer log in before its sessions are ended, whatever it still owns."""
    wh = load_warehouses(warehouse["file"], Path("unused.duckdb"))["pg"]
    place = Environment(warehouse="pg", target="main", schema="ends", database=wh.dbname)
    login = await run_credentials.issue(
        wh, Resolver(), [place], scope="ends", holder="ends", team="t", writes=True, seconds=60
    )
    session = await _login(warehouse_pg_url, warehouse["database"], login)
    await session.execute(
        "SET ROLE NONE; CREATE TABLE ends.mine (x int);"
        " ALTER ROLE current_user PASSWORD 'chosen-by-the-run'"
    )
    admin = await _admin(warehouse_pg_url, warehouse["database"])
    holder = await _admin(warehouse_pg_url, warehouse["database"])
    try:
        # The drop waits here (giving `mine` to the writer) once the sessions are ended.
        holding = holder.transaction()
        await holding.start()
        await holder.execute("LOCK TABLE ends.mine IN ACCESS SHARE MODE")
        dropping = asyncio.create_task(run_credentials.drop(wh, Resolver(), login))

        async def ended() -> bool:
            sessions = "SELECT count(*) FROM pg_stat_activity WHERE usename = $1"
            return await admin.fetchval(sessions, login.user) == 0

        await wait_for(ended, timeout=20)
        assert not await admin.fetchval(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = $1", login.user
        )
        again = msgspec.structs.replace(login, password="chosen-by-the-run")
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="log in"):
            await _login(warehouse_pg_url, warehouse["database"], again)
        await holding.rollback()
        await asyncio.wait_for(dropping, 20)
        assert await _roles(admin, login.user) == {}
        owner = "SELECT tableowner FROM pg_tables WHERE schemaname = 'ends'"
        assert await admin.fetchval(owner) == run_credentials.group_roles(place)[0]
    finally:
        session.terminate()
        await holder.close()
        await admin.close()


async def test_the_sweep_goes_on_past_a_role_it_cannot_drop(warehouse, warehouse_pg_url):
    """An expired run role that owns something in another database cannot be dropped from
    the warehouse's: it is said and left, and the roles after it still go."""
    wh = load_warehouses(warehouse["file"], Path("unused.duckdb"))["pg"]
    tag = uuid.uuid4().hex[:8]
    stuck, gone = (f"{run_credentials.RUN_PREFIX}{c}_{tag}" for c in "az")
    admin = await _admin(warehouse_pg_url)  # the server's own database, not the warehouse's
    for role in (stuck, gone):
        await admin.execute(f"CREATE ROLE {role} LOGIN VALID UNTIL '2000-01-01'")
    await admin.execute(f"CREATE SCHEMA {stuck} AUTHORIZATION {stuck}")
    try:
        dropped = await run_credentials.sweep(wh, Resolver())
        assert gone in dropped and stuck not in dropped, dropped
        assert set(await _roles(admin, run_credentials.RUN_PREFIX)) & {stuck, gone} == {stuck}
    finally:
        await admin.execute(f"DROP SCHEMA {stuck}; DROP ROLE {stuck}")
        await admin.close()


async def test_a_teams_environment_is_refused_to_another_team_naming_only_the_schema(warehouse):
    """Two teams whose profiles name one schema would share its roles: the second is
    refused, without being told who the first is."""
    wh = load_warehouses(warehouse["file"], Path("unused.duckdb"))["pg"]
    place = Environment(warehouse="pg", target="main", schema="shared", database=wh.dbname)

    async def issue(team: str) -> run_credentials.Login:
        return await run_credentials.issue(
            wh, Resolver(), [place], scope=team, holder=team, team=team, writes=True, seconds=60
        )

    first = await issue("team-alpha")
    with pytest.raises(run_credentials.CredentialRefused, match="schema 'shared'") as refused:
        await issue("team-beta")
    assert "team-alpha" not in str(refused.value)
    await run_credentials.drop(wh, Resolver(), first)


async def test_a_schema_another_role_made_first_is_refused_and_a_login_searches_its_own(
    warehouse, warehouse_pg_url
):
    """A writer can make schemas: one team's code can make another's schema first, to own
    what is built there, or one named for its group role, where the default search_path
    ("$user") looks first. A schema its writer does not own is refused; a login searches
    its environment's schema alone."""
    wh = load_warehouses(warehouse["file"], Path("unused.duckdb"))["pg"]

    async def issue(schema: str, team: str) -> run_credentials.Login:
        place = Environment(warehouse="pg", target="main", schema=schema, database=wh.dbname)
        return await run_credentials.issue(
            wh, Resolver(), [place], scope=schema, holder=team, team=team, writes=True, seconds=60
        )

    squatter = await issue("squatter", "team-b")
    session = await _login(warehouse_pg_url, warehouse["database"], squatter)
    try:
        assert await session.fetchval("SHOW search_path") == "squatter"
        await session.execute("CREATE SCHEMA victim")
        with pytest.raises(
            run_credentials.CredentialRefused,
            match="schema 'victim' of database '.*' is owned by role 'jetdbt_w_squatter_",
        ):
            await issue("victim", "team-a")
    finally:
        await session.close()
    await run_credentials.drop(wh, Resolver(), squatter)


@pytest.mark.dbt
async def test_a_run_waiting_for_its_login_is_cancelled_at_once(stack, warehouse, warehouse_pg_url):
    """A run whose login waits on the warehouse (here, the roles' lock held) does not keep
    its lease and slot: a cancel ends it then, not when the warehouse gives in."""
    holder = await _admin(warehouse_pg_url, warehouse["database"])
    admin = await _admin(warehouse_pg_url, warehouse["database"])
    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute(f"LOCK TABLE {run_credentials.LOCK_SCHEMA}.lock")
        run_id = uuid.uuid4().hex
        command = RunCommand(command=BUILD, run_id=run_id)
        build = asyncio.create_task(client.run(stack.bus, "creds", command))

        async def waiting() -> bool:
            return await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'LOCK TABLE jetdbt_credentials%'"
            )

        await wait_for(waiting, timeout=60)
        by = client.principal()
        cancel = CancelCommand(run_id=run_id, requested_by=by)
        await stack.bus.publish_command("cancel", "creds", cancel, run_id, principal=by)
        final = await asyncio.wait_for(build, run_credentials.LOCK_TIMEOUT / 2)
        assert final.result.status == "cancelled", final.result
        await holding.rollback()
    finally:
        await holder.close()
        await admin.close()

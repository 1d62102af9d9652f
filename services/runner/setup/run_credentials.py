"""A warehouse credential of each run's own (`credentials: per_run`), dropped with the run.

The operator's long-lived credential never leaves the runner: with it, before dbt starts,
the runner makes a LOGIN role for the run alone, with a random password, valid until the
run's deadline and a member of its environment's writer role (a command that builds) or
reader role (one that only reads). dbt's profile holds only that role, whose own setting
makes every session act as the group role (`ALTER ROLE … SET role`), so what a build
creates is owned by the writer role and the next run's role can replace it. The role is
dropped when the run ends; one a dead runner left is dropped by the next run that takes
its name, or by the sweep of expired run roles when a runner starts. Postgres only: other
warehouses keep the operator's credential (docs/security.md).

A login is named for what its run holds alone (the environment's lease, attempt.scope):
the next run there makes the same name anew, so dbt, whose partial parse compares the
profile's user, need not parse the project again for every run. Its comment names the
attempt that made it, so only that attempt's end drops it.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec
import yaml
from jetdbt.services.runner.setup import connections
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.shared.bus.commands import DbtCommand
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.project.environments import Environment

if TYPE_CHECKING:
    from jetdbt.services.runner.setup.plan import Plan
    from jetdbt.services.runner.setup.warehouses import Warehouse

__all__ = [
    "CredentialRefused",
    "DROP_SECONDS",
    "ISSUE_FAILURES",
    "Login",
    "PER_RUN",
    "check",
    "drop",
    "group_roles",
    "into_profile",
    "issue",
    "login_left_out",
    "places",
    "run_role",
    "sweep",
    "sweep_all",
    "writes",
]

PER_RUN = "per_run"
ISSUING = ("postgres",)  # the warehouse types that can issue a run its own role
RUN_PREFIX = "jetdbt_run_"
WRITER_PREFIX = "jetdbt_w_"
READER_PREFIX = "jetdbt_r_"
# The commands whose runs build (and so write) in their environment; every other one
# (test, show, docs generate, source freshness) only reads. A macro exists to change the
# warehouse (grants, clean-ups), so run-operation writes too. A test that stores its
# failures, or an on-run-end hook that grants, needs the writer: `build` (docs/security.md).
WRITING = frozenset({"build", "run", "seed", "snapshot", "run_operation", "close_pr"})
CONNECT_TIMEOUT = 10.0  # seconds to reach the warehouse before the run fails saying so
# Seconds the operator's session waits for a lock, and for any one statement, before it
# fails saying so: whatever a run's code holds, no other run waits on it for longer.
LOCK_TIMEOUT = 30
STATEMENT_TIMEOUT = 60
# The longest a run's end waits for its login's drop; one not dropped by then is swept.
DROP_SECONDS = 120
TERMINATE_WAIT_MS = 5000  # how long the end of a dropped login's session is waited for
# Every change to the roles of one warehouse, one at a time: concurrent GRANTs on one
# object fail in Postgres ("tuple concurrently updated"). The lock is a table in a schema
# the operator's login owns, so a run's role cannot take it (anyone can take an advisory
# lock) and so hold every other run's login back.
LOCK_SCHEMA = "jetdbt_credentials"
_LOCK = f"LOCK TABLE {LOCK_SCHEMA}.lock IN EXCLUSIVE MODE"


class CredentialRefused(ValueError):
    """The run cannot have a credential of its own; the message says why."""


# What making or dropping a role can fail with: a refusal, the warehouse's own error, or
# the warehouse out of reach.
ISSUE_FAILURES = (CredentialRefused, asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


class Login(msgspec.Struct, frozen=True, kw_only=True):
    """A run's own credential: the login role, its password, the group role it acts as,
    and the attempt that made it (the role's comment)."""

    user: str
    password: str
    role: str
    holder: str = ""


def check(wh: Warehouse) -> None:
    """Raise ValueError when `wh` asks for per-run credentials its type cannot issue."""
    if wh.credentials == PER_RUN and wh.type not in ISSUING:
        raise ValueError(
            f"warehouse {wh.name!r}: credentials: per_run needs a warehouse that can issue"
            f" a role per run ({', '.join(ISSUING)}); a {wh.type} warehouse keeps the"
            " configured credential (remove the key)"
        )
    if wh.credentials == PER_RUN and "role" in wh.connection_keys():
        raise ValueError(
            f"warehouse {wh.name!r}: with credentials: per_run each run acts as its"
            " environment's writer or reader role; remove 'role'"
        )


def writes(cmd: DbtCommand) -> bool:
    return cmd.label in WRITING


def login_left_out(output: dict[str, Any], scope: str) -> dict[str, Any]:
    """A profile output without the operator's login: the user is the login of the run that
    holds `scope` (its lease), its password put in when issued; a deploy's parse connects
    to nothing. dbt's partial parse compares the user, so it is the same from run to run."""
    out = {**output, "user": run_role(scope), "password": ""}
    out.pop("pass", None)
    return out


def into_profile(plan: Plan, login: Login) -> str:
    """The plan's profiles.yml text with the run's own login in its target's output. The
    group role is the login's own setting, not the profile's (`role`, which dbt's partial
    parse would compare): a build's and a test's profiles differ in the password alone."""
    doc = yaml.safe_load(plan.profiles_text)
    doc[plan.profile]["outputs"][plan.target].update(user=login.user, password=login.password)
    return yaml.safe_dump(doc, sort_keys=False)


def _name(prefix: str, *parts: str, readable: str = "") -> str:
    """A role name within Postgres's 63 characters: a readable slug and a digest of `parts`."""
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    slug = re.sub(r"[^a-z0-9_]", "", readable.lower())[:24]
    # 64 bits of digest: another environment cannot be made to share a role by searching.
    return f"{prefix}{slug}_{digest[:16]}" if slug else f"{prefix}{digest[:16]}"


def group_roles(environment: Environment) -> tuple[str, str]:
    """The writer and reader roles of an environment (its database and schema)."""
    parts = (environment.database, environment.schema)
    readable = environment.schema
    return _name(WRITER_PREFIX, *parts, readable=readable), _name(
        READER_PREFIX, *parts, readable=readable
    )


def run_role(scope: str) -> str:
    """The login role of the run that holds `scope` (one at a time)."""
    return _name(RUN_PREFIX, scope)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


async def _connect(wh: Warehouse, resolver: Resolver) -> asyncpg.Connection:
    """The operator's own connection to the warehouse: only ever in the runner."""
    keys = connections.render(wh.type, wh.connection_keys(), resolver, f"warehouse {wh.name!r}")
    ssl = keys.get("sslmode")
    return await asyncpg.connect(
        host=keys.get("host"),
        port=keys.get("port"),
        user=keys.get("user"),
        password=keys.get("password") or keys.get("pass") or None,
        database=keys.get("dbname"),
        timeout=CONNECT_TIMEOUT,
        server_settings={
            "lock_timeout": f"{LOCK_TIMEOUT}s",
            "statement_timeout": f"{STATEMENT_TIMEOUT}s",
        },
        **({"ssl": ssl} if ssl else {}),
    )


async def _lockable(conn: asyncpg.Connection) -> None:
    """The lock's table, made when missing (another runner may be making it too); raises
    CredentialRefused when its schema is not the operator's own (a run's role made it)."""
    try:
        async with conn.transaction():
            await conn.execute(
                f"CREATE SCHEMA IF NOT EXISTS {LOCK_SCHEMA};"
                f"CREATE TABLE IF NOT EXISTS {LOCK_SCHEMA}.lock ()"
            )
    except (asyncpg.UniqueViolationError, asyncpg.DuplicateObjectError):
        pass  # made meanwhile by another runner: its owner is checked below
    owner = await conn.fetchval(
        "SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = $1", LOCK_SCHEMA
    )
    if owner != await conn.fetchval("SELECT current_user::text"):
        raise CredentialRefused(
            f"schema {LOCK_SCHEMA!r}, where per_run credentials take their lock, is owned by"
            f" {owner!r}, not by the warehouse's configured login: drop it"
        )


@contextlib.asynccontextmanager
async def _locked(conn: asyncpg.Connection):
    """A transaction holding the lock of the warehouse's roles."""
    async with conn.transaction():
        await conn.execute(_LOCK)
        yield


async def _ensure(conn: asyncpg.Connection, environment: Environment, team: str) -> tuple[str, str]:
    """The environment's writer and reader roles, made when missing, with what a dbt build
    needs: the writer creates schemas in the database and owns the environment's schema
    and what it builds; the reader reads all the writer makes (default privileges).

    The writer's comment names the team it was made for: two teams whose environments
    are one schema would otherwise share its roles, and each write the other's tables.
    Raises CredentialRefused when it was made for another team."""
    writer, reader = group_roles(environment)
    w, r = _ident(writer), _ident(reader)
    made_for = _literal(f"jetdbt team {team}")
    have = {r["rolname"] for r in await conn.fetch(
        "SELECT rolname FROM pg_roles WHERE rolname = ANY($1::text[])", [writer, reader]
    )}  # fmt: skip
    if writer in have:
        said = await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1", writer
        )
        if said != f"jetdbt team {team}":
            raise CredentialRefused(
                f"schema {environment.schema!r} of database {environment.database!r} is"
                " another team's environment (its writer role was made for that team);"
                " give this project's profile a schema of its own"
            )
    else:
        await conn.execute(f"CREATE ROLE {w} NOLOGIN; COMMENT ON ROLE {w} IS {made_for}")
    if reader not in have:
        await conn.execute(f"CREATE ROLE {r} NOLOGIN")
    db, schema = _ident(environment.database), _ident(environment.schema)
    await conn.execute(
        f"GRANT {r} TO {w};"
        f"GRANT CONNECT, CREATE, TEMPORARY ON DATABASE {db} TO {w};"
        f"GRANT CONNECT ON DATABASE {db} TO {r};"
        f"CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {w}"
    )
    # Writers can make schemas: one another team's made first is theirs, whatever we grant.
    owner = await conn.fetchval(
        "SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = $1",
        environment.schema,
    )
    if owner != writer:
        raise CredentialRefused(
            f"schema {environment.schema!r} of database {environment.database!r} is owned by"
            f" role {owner!r}, not by its environment's writer role {writer!r}: drop it, or,"
            f" if its tables are the environment's, ALTER SCHEMA … OWNER TO {writer}"
        )
    await conn.execute(
        f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {w};"
        f"GRANT USAGE ON SCHEMA {schema} TO {r};"
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {w} GRANT SELECT ON TABLES TO {r};"
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {w} GRANT USAGE ON SCHEMAS TO {r};"
    )
    if len(have) < 2:  # new roles: what the schema already holds is readable too
        await conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {r}")
    return writer, reader


async def _drop_role(conn: asyncpg.Connection, name: str, holder: str | None = None) -> bool:
    """Drop a login role (with `holder`, only one that attempt made); whether it was.

    It can no longer log in (committed) before its sessions are ended and waited for: a
    session could otherwise outlive it, or log in anew meanwhile with a password it set
    itself. What it owns goes to the writer role it belonged to (dbt sets that role;
    project code might not)."""
    role = _ident(name)
    async with _locked(conn):
        made_by = await conn.fetchrow(
            "SELECT shobj_description(oid, 'pg_authid') AS holder FROM pg_roles WHERE rolname = $1",
            name,
        )
        if made_by is None or (holder is not None and made_by["holder"] != holder):
            return False
        await conn.execute(f"ALTER ROLE {role} NOLOGIN")
    await conn.execute(
        "SELECT pg_terminate_backend(pid, $2) FROM pg_stat_activity WHERE usename = $1",
        name,
        TERMINATE_WAIT_MS,
    )
    async with _locked(conn):
        heir = await conn.fetchval(
            "SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid"
            " JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = $1"
            " AND starts_with(g.rolname, $2)",
            name,
            WRITER_PREFIX,
        )
        reassign = f"REASSIGN OWNED BY {role} TO {_ident(heir)};" if heir else ""
        await conn.execute(f"{reassign}DROP OWNED BY {role}; DROP ROLE {role}")
    return True


def places(plan: Plan) -> list[Environment]:
    """Where a run's login acts: the environment it runs in, then, when another, the
    environment a deferral reads (a scratch schema's own, or the one deferred to). Raises
    CredentialRefused when the run's environment is known only once dbt runs."""
    if plan.environment is None:
        raise CredentialRefused(
            f"warehouse {plan.warehouse!r} gives each run a role of its own (credentials:"
            f" per_run), which needs the run's schema known before dbt runs: {plan.unlocated}"
        )
    home = plan.home if plan.home != plan.environment else None
    return [plan.environment, *([home] if home else [])]


async def issue(
    wh: Warehouse,
    resolver: Resolver,
    places: list[Environment],
    *,
    scope: str,
    holder: str,
    team: str,
    writes: bool,
    seconds: float,
) -> Login:
    """Make the login role of the run that holds `scope`, valid for `seconds`.

    Args:
        wh: the warehouse (`credentials: per_run`), whose configured login makes the role.
        places: the environment the run acts in, then those it only reads (`places`).
        scope: what the run holds alone (its environment's lease): names the role.
        holder: the attempt that makes it (project, run, attempt), the role's comment.
        team: the project's team: the environments' roles are refused it when made for
            another team.
        writes: a member of the first place's writer role (True) or of its reader role.
        seconds: the run's time left; the role cannot log in after it.

    A role of the same name is an earlier holder's whose runner is gone: dropped first.
    Raises asyncpg's errors or OSError when the warehouse refuses or cannot be reached.
    """
    # Letters and digits only: masking finds a secret by its letters, and a `-` or `_` at
    # either end of one would be left beside the mask.
    user, password = run_role(scope), secrets.token_hex(24)
    conn = await _connect(wh, resolver)
    try:
        await _lockable(conn)
        await _drop_role(conn, user)
        async with _locked(conn):
            made = [await _ensure(conn, place, team) for place in places]
            groups = [made[0][0] if writes else made[0][1], *(r for _, r in made[1:])]
            until = await conn.fetchval("SELECT now() + make_interval(secs => $1)", seconds)
            await conn.execute(
                f"CREATE ROLE {_ident(user)} LOGIN PASSWORD {_literal(password)}"
                f" VALID UNTIL {_literal(until.isoformat())}"
                f" IN ROLE {', '.join(_ident(g) for g in groups)};"
                f"ALTER ROLE {_ident(user)} SET role = {_literal(groups[0])};"
                # Not "$user": a schema named for the group role, which anyone's code can
                # make, would otherwise run its functions as the run (CVE-2018-1058).
                f"ALTER ROLE {_ident(user)} SET search_path TO {_ident(places[0].schema)};"
                f"COMMENT ON ROLE {_ident(user)} IS {_literal(holder)}"
            )
    finally:
        await conn.close()
    resolver.masker.add(password)
    return Login(user=user, password=password, role=groups[0], holder=holder)


async def drop(wh: Warehouse, resolver: Resolver, login: Login) -> None:
    """Drop the run's role, unless a later holder of its scope made it anew (this attempt
    was fenced off): what the run's code could take dies with the run. Its password is
    still masked: the run's artifacts and kept log go out after this."""
    conn = await _connect(wh, resolver)
    try:
        await _lockable(conn)
        await _drop_role(conn, login.user, login.holder)
    finally:
        await conn.close()


async def sweep(wh: Warehouse, resolver: Resolver) -> list[str]:
    """Drop every run role of the warehouse past its validity (its run is over, however it
    ended); returns those dropped. Each on its own: one that cannot be dropped is said and
    left, and keeps no other from going."""
    log = jlog.get("runner", warehouse=wh.name)
    conn = await _connect(wh, resolver)
    dropped = []
    try:
        await _lockable(conn)
        expired = [r["rolname"] for r in await conn.fetch(
            "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)"
            " AND rolvaliduntil < now() ORDER BY rolname",
            RUN_PREFIX,
        )]  # fmt: skip
        for name in expired:
            try:
                if await _drop_role(conn, name):
                    dropped.append(name)
            except asyncpg.PostgresError as exc:
                log.warning("run_role_not_swept", role=name, error=str(exc)[:300])
    finally:
        await conn.close()
    return dropped


async def sweep_all(warehouses: Iterable[Warehouse], resolver: Resolver, log) -> None:
    """The sweep of every per_run warehouse, as a runner starts; one out of reach is said
    and left for the next runner's start (its roles cannot log in anyway)."""
    for wh in warehouses:
        if wh.credentials != PER_RUN:
            continue
        try:
            dropped = await sweep(wh, resolver)
        except ISSUE_FAILURES as exc:
            log.warning("run_roles_not_swept", warehouse=wh.name, error=str(exc)[:300])
            continue
        if dropped:
            log.info("run_roles_swept", warehouse=wh.name, roles=dropped)

"""Settings read from the environment, once, into a typed Struct."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from shared.engines import ENGINES

__all__ = ["Settings", "Secret", "load", "stacks_dir", "CONTRACT", "STACK_SETTINGS"]

# The checkout's streams.yaml; an installed wheel carries it beside this module (setup.py).
_PACKAGED_CONTRACT = Path(__file__).resolve().parent / "streams.yaml"
CONTRACT = (
    _PACKAGED_CONTRACT
    if _PACKAGED_CONTRACT.exists()
    else _PACKAGED_CONTRACT.parent.parent / "streams.yaml"
)


class Secret(str):
    """A credential: its repr never shows it, so a logged Settings cannot leak it."""

    def __repr__(self) -> str:
        return "Secret('***')"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str | None
    database_url: str | None
    home: Path
    max_concurrent_runs: int = 4
    max_runs_per_team: int = 2  # so one team cannot take every run slot
    run_timeout_seconds: int = 3600
    run_ack_wait_seconds: int = 60  # how long a silent runner keeps a run before redelivery
    # Finished runs per project and environment that keep their log object and files.
    run_retention: int = 30
    # An external system's commands and declared writes a runner handles a minute: the log
    # is never purged, so one principal's share of it is bounded.
    external_publishes_per_minute: int = 120
    api_host: str = "127.0.0.1"
    api_port: int = 8580
    # The MCP server's port (streamable HTTP, beside the API); None: see `mcp_listen_port`.
    mcp_port: int | None = None
    schema: str = "jetdbt"
    warehouses_file: Path | None = None
    variables_file: Path | None = None
    engines_dir: Path | None = None
    # The engine a project whose jetdbt.yaml names none runs on (JETDBT_DEFAULT_ENGINE).
    default_engine: str = ENGINES[0]
    runner_name: str | None = None
    # Environment names a project's descriptor may reference ($env:NAME); `X_*` is a prefix.
    env_references: tuple[str, ...] = ()
    # Who this process is on NATS (NATS_USER, NATS_PASSWORD) and on the API (JETDBT_TOKEN);
    # unset, the CLI uses what `jetdbt up` generated under JETDBT_HOME/access.
    nats_user: str | None = None
    nats_password: Secret | None = None
    token: Secret | None = None
    # Who the CLI's commands speak for (JETDBT_PRINCIPAL; default: the login name). Only
    # an operator's NATS user may name any principal; a system's user only its own.
    principal: str | None = None
    # The sandbox every dbt invocation runs in (services/runner/process/containment.py): off only
    # by an explicit JETDBT_SANDBOX=off; the uid a root runner's children run as; the
    # memory and CPUs each invocation may use; an operator's delegated cgroup v2 folder.
    sandbox: bool = True
    sandbox_uid: int = 65534
    run_memory: int = 2 << 30
    run_cpus: float = 2.0
    cgroup: Path | None = None
    # Folders every run may read besides its job (shared reference files); JETDBT_HOME
    # stays hidden even inside one of them.
    sandbox_read: tuple[Path, ...] = ()
    # Engine environments (services/runner/provision/environments.py): the dbt-core range an
    # adapter's environment resolves within, the adapters beyond the known ones an operator
    # trusts to install, where environments are kept, and how long an idle one's warm
    # dbt stays up.
    dbt_core_floor: str = "1.10"
    dbt_core_ceiling: str = "1.12"
    extra_adapters: tuple[str, ...] = ()
    environments_dir: Path | None = None
    environment_idle_seconds: int = 600

    @property
    def engine_environments(self) -> Path:
        """JETDBT_ENVIRONMENTS_DIR, else JETDBT_HOME/environments."""
        return self.environments_dir or self.home / "environments"

    # Webhooks (services/notifier): the hosts a hook's URL may name (JETDBT_WEBHOOK_HOSTS,
    # comma-separated; `*` any public host; loopback and private addresses only when listed
    # by name or address), the attempts of one delivery, the first retry's delay (doubled
    # each time), and the base URL of the links a body carries (JETDBT_PUBLIC_URL).
    webhook_hosts: tuple[str, ...] = ()
    webhook_attempts: int = 5
    webhook_retry_seconds: float = 2.0
    public_url: str = ""

    @property
    def mcp_listen_port(self) -> int:
        """JETDBT_MCP_PORT, else the API's port + 1 (any free port when the API's is 0)."""
        if self.mcp_port is not None:
            return self.mcp_port
        return self.api_port + 1 if self.api_port else 0

    @property
    def warehouse_dir(self) -> Path:
        return self.home / "warehouse"

    @property
    def default_duckdb(self) -> Path:
        """The embedded warehouse `main`. Not main.duckdb: DuckDB names the database after the
        file, and a database called `main` beside the default schema `main` makes dbt-duckdb
        miss existing seeds on the second build ("table already exists")."""
        return self.warehouse_dir / "warehouse.duckdb"

    @property
    def runner_cache(self) -> Path:
        return self.home / "runner"


def _int(env, name: str, default: int | None) -> int | None:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a whole number") from None


def _engine(env, name: str) -> str:
    """One of the engines a descriptor may name."""
    raw = (env.get(name) or ENGINES[0]).strip()
    if raw not in ENGINES:
        raise ValueError(f"{name}={raw!r} is not an engine; one of {', '.join(ENGINES)}")
    return raw


def _positive(env, name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 1:
        raise ValueError(f"{name}={value} must be at least 1")
    return value


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _bytes(env, name: str, default: int) -> int:
    """A size such as 2g, 512m or a number of bytes."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    number, unit = (raw[:-1], _UNITS[raw[-1]]) if raw[-1] in _UNITS else (raw, 1)
    try:
        value = int(float(number) * unit)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a size (such as 2g, 512m)") from None
    if value < 16 << 20:
        raise ValueError(f"{name}={raw!r} is under 16m, too little for dbt")
    return value


def _number(env, name: str, default: float, least: float, what: str) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of {what}") from None
    if value < least:
        raise ValueError(f"{name}={raw!r} must be at least {least}")
    return value


def _cpus(env, name: str, default: float) -> float:
    return _number(env, name, default, 0.01, "CPUs")


def _switch(env, name: str) -> bool:
    raw = (env.get(name) or "on").strip().lower()
    if raw not in ("on", "off"):
        raise ValueError(f"{name}={raw!r} must be on or off")
    return raw == "on"


def _path(env, name: str) -> Path | None:
    raw = env.get(name)
    return Path(raw).absolute() if raw else None


# The settings a person starting `jetdbt up` most often changes, for its --help: name, default.
STACK_SETTINGS = (
    ("JETDBT_HOME", "./.jetdbt", "the embedded servers' data, access files and warehouse"),
    ("JETDBT_API_HOST", "127.0.0.1", "the API's and viewer's address"),
    ("JETDBT_API_PORT", "8580", "the API's port (0: any free port)"),
    ("JETDBT_MCP_PORT", "API port + 1", "the MCP server's port"),
    ("NATS_URL", "none: an embedded nats-server", "a NATS server to use instead"),
    ("DATABASE_URL", "none: an embedded Postgres", "a Postgres to use instead"),
    ("JETDBT_SCHEMA", "jetdbt", "the projections' Postgres schema"),
    ("JETDBT_WAREHOUSES", "none: DuckDB in JETDBT_HOME", "warehouses.yaml (see the README)"),
    ("MAX_CONCURRENT_RUNS", "4", "runs at once, over every runner"),
    ("MAX_RUNS_PER_TEAM", "2", "runs at once of one team"),
    ("RUN_TIMEOUT_SECONDS", "3600", "the longest a run may take"),
    ("RUN_MEMORY", "2g", "memory of each dbt invocation"),
)


def stacks_dir(env=None) -> Path:
    """Where this user's running `jetdbt up`s are recorded, so a CLI in any folder finds
    one: JETDBT_STACKS_DIR, else $XDG_STATE_HOME/jetdbt/stacks, else
    ~/.local/state/jetdbt/stacks (the user's own). Not XDG_RUNTIME_DIR: the embedded
    Postgres sets one of its own in the process that starts it."""
    env = os.environ if env is None else env
    if env.get("JETDBT_STACKS_DIR"):
        return Path(env["JETDBT_STACKS_DIR"]).absolute()
    state = Path(env["XDG_STATE_HOME"]) if env.get("XDG_STATE_HOME") else None
    return (state or Path.home() / ".local" / "state") / "jetdbt" / "stacks"


def load(env=None) -> Settings:
    """Read settings; JETDBT_HOME (default ./.jetdbt) holds the embedded servers' data."""
    env = os.environ if env is None else env
    return Settings(
        nats_url=env.get("NATS_URL") or None,
        database_url=env.get("DATABASE_URL") or None,
        home=Path(env.get("JETDBT_HOME") or ".jetdbt").absolute(),
        max_concurrent_runs=_int(env, "MAX_CONCURRENT_RUNS", 4),
        max_runs_per_team=_int(env, "MAX_RUNS_PER_TEAM", 2),
        run_timeout_seconds=_int(env, "RUN_TIMEOUT_SECONDS", 3600),
        run_ack_wait_seconds=_int(env, "RUN_ACK_WAIT_SECONDS", 60),
        run_retention=_positive(env, "RUN_RETENTION", 30),
        external_publishes_per_minute=_positive(env, "EXTERNAL_PUBLISHES_PER_MINUTE", 120),
        api_host=env.get("JETDBT_API_HOST") or "127.0.0.1",
        api_port=_int(env, "JETDBT_API_PORT", 8580),
        mcp_port=_int(env, "JETDBT_MCP_PORT", None),
        schema=env.get("JETDBT_SCHEMA") or "jetdbt",
        warehouses_file=_path(env, "JETDBT_WAREHOUSES"),
        variables_file=_path(env, "JETDBT_VARIABLES"),
        engines_dir=_path(env, "JETDBT_ENGINES_DIR"),
        default_engine=_engine(env, "JETDBT_DEFAULT_ENGINE"),
        runner_name=env.get("JETDBT_RUNNER_NAME") or None,
        nats_user=env.get("NATS_USER") or None,
        nats_password=Secret(env["NATS_PASSWORD"]) if env.get("NATS_PASSWORD") else None,
        token=Secret(env["JETDBT_TOKEN"]) if env.get("JETDBT_TOKEN") else None,
        principal=env.get("JETDBT_PRINCIPAL") or None,
        sandbox=_switch(env, "JETDBT_SANDBOX"),
        sandbox_uid=_int(env, "JETDBT_SANDBOX_UID", 65534),
        run_memory=_bytes(env, "RUN_MEMORY", 2 << 30),
        run_cpus=_cpus(env, "RUN_CPUS", 2.0),
        cgroup=_path(env, "JETDBT_CGROUP"),
        sandbox_read=tuple(
            Path(p.strip()).absolute()
            for p in (env.get("JETDBT_SANDBOX_READ") or "").split(",")
            if p.strip()
        ),
        env_references=_names(env, "JETDBT_ENV_REFERENCES"),
        dbt_core_floor=_version(env, "DBT_CORE_1X_FLOOR", "1.10"),
        dbt_core_ceiling=_version(env, "DBT_CORE_1X_CEILING", "1.12"),
        extra_adapters=_names(env, "JETDBT_EXTRA_ADAPTERS"),
        environments_dir=_path(env, "JETDBT_ENVIRONMENTS_DIR"),
        environment_idle_seconds=_positive(env, "JETDBT_ENVIRONMENT_IDLE_SECONDS", 600),
        webhook_hosts=tuple(
            h.strip().lower()
            for h in (env.get("JETDBT_WEBHOOK_HOSTS") or "").split(",")
            if h.strip()
        ),
        webhook_attempts=_positive(env, "JETDBT_WEBHOOK_ATTEMPTS", 5),
        webhook_retry_seconds=_number(env, "JETDBT_WEBHOOK_RETRY_SECONDS", 2.0, 0.0, "seconds"),
        public_url=(env.get("JETDBT_PUBLIC_URL") or "").rstrip("/"),
    )


def _version(env, name: str, default: str) -> str:
    """A release number such as 1.10 (it becomes a requirement: nothing else may pass)."""
    raw = (env.get(name) or default).strip()
    if not all(part.isdigit() for part in raw.split(".")):
        raise ValueError(f"{name}={raw!r} is not a release number such as {default}")
    return raw


def _names(env, name: str) -> tuple[str, ...]:
    """A comma-separated list."""
    return tuple(n.strip() for n in (env.get(name) or "").split(",") if n.strip())

"""Settings read from the environment, once, into a typed Struct.

Every setting is declared once, in `DECLARED`: its variable, the Settings field it fills, its
default as you would write it, what it means and how its text is read. The Struct's fields and
defaults, `load()`, `jetdbt up --help`'s list and the table in docs/operations.md all come
from it (`python -m jetdbt.shared.process.config` writes the table again;
tests/unit/test_settings_table.py fails
while it is stale, or while code reads a variable declared neither here nor in `NOT_SETTINGS`).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from jetdbt.shared.project.engines import ENGINES

__all__ = [
    "Settings",
    "Secret",
    "Setting",
    "DECLARED",
    "NOT_SETTINGS",
    "load",
    "stacks_dir",
    "settings_table",
    "generated",
    "CONTRACT",
    "STACK_SETTINGS",
]

# The checkout's streams.yaml; an installed wheel carries it in the shared package (setup.py).
_PACKAGED_CONTRACT = Path(__file__).resolve().parents[1] / "streams.yaml"
CONTRACT = (
    _PACKAGED_CONTRACT
    if _PACKAGED_CONTRACT.exists()
    else _PACKAGED_CONTRACT.parent.parent / "streams.yaml"
)


class Secret(str):
    """A credential: its repr never shows it, so a logged Settings cannot leak it."""

    def __repr__(self) -> str:
        return "Secret('***')"


def _text(name: str, raw: str) -> str:
    return raw


def _whole(name: str, raw: str) -> int:
    """Plain digits, a minus before them at most: not `1_0` or another script's digits,
    which `int` reads too."""
    if not re.fullmatch(r"-?[0-9]{1,18}", raw.strip()):
        raise ValueError(f"{name}={raw!r} is not a whole number")
    return int(raw)


def _positive(name: str, raw: str) -> int:
    value = _whole(name, raw)
    if value < 1:
        raise ValueError(f"{name}={value} must be at least 1")
    return value


def _replicas(name: str, raw: str) -> int:
    """1 to 5: JetStream holds at most five replicas of a stream."""
    value = _positive(name, raw)
    if value > 5:
        raise ValueError(f"{name}={value} is more than the 5 replicas JetStream holds at most")
    return value


def _engine(name: str, raw: str) -> str:
    """One of the engines a descriptor may name."""
    if raw.strip() not in ENGINES:
        raise ValueError(f"{name}={raw.strip()!r} is not an engine; one of {', '.join(ENGINES)}")
    return raw.strip()


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _bytes(name: str, raw: str) -> int:
    """A size such as 2g, 512m or a number of bytes."""
    raw = raw.strip().lower()
    number, unit = (raw[:-1], _UNITS[raw[-1]]) if raw[-1:] in _UNITS else (raw, 1)
    try:
        value = int(float(number) * unit)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a size (such as 2g, 512m)") from None
    if value < 16 << 20:
        raise ValueError(f"{name}={raw!r} is under 16m, too little for dbt")
    return value


def _number(least: float, what: str, most: float = float("inf")) -> Callable[[str, str], float]:
    def read(name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a number of {what}") from None
        if value < least:
            raise ValueError(f"{name}={raw!r} must be at least {least}")
        if value > most:
            raise ValueError(f"{name}={raw!r} must be at most {most:g}")
        return value

    return read


def _switch(name: str, raw: str) -> bool:
    if raw.strip().lower() not in ("on", "off"):
        raise ValueError(f"{name}={raw.strip().lower()!r} must be on or off")
    return raw.strip().lower() == "on"


def _path(name: str, raw: str) -> Path:
    return Path(raw).absolute()


def _paths(name: str, raw: str) -> tuple[Path, ...]:
    return tuple(Path(p.strip()).absolute() for p in raw.split(",") if p.strip())


def _names(name: str, raw: str) -> tuple[str, ...]:
    """A comma-separated list."""
    return tuple(n.strip() for n in raw.split(",") if n.strip())


def _hosts(name: str, raw: str) -> tuple[str, ...]:
    return tuple(h.lower() for h in _names(name, raw))


def _version(name: str, raw: str) -> str:
    """A release number such as 1.10 (it becomes a requirement: nothing else may pass)."""
    if not all(part.isdigit() for part in raw.strip().split(".")):
        raise ValueError(f"{name}={raw.strip()!r} is not a release number such as 1.10")
    return raw.strip()


def _secret(name: str, raw: str) -> Secret:
    return Secret(raw)


def _base_url(name: str, raw: str) -> str:
    return raw.rstrip("/")


class Setting(NamedTuple):
    """One environment variable: `default` is written as a person would set it (None: unset
    means none); `field` is the Settings field it fills (None: read where `read_by` says)."""

    name: str
    field: str | None
    type: Any
    default: str | None
    meaning: str
    group: str
    read: Callable[[str, str], Any] = _text
    # The default in words, where the value alone would not say it.
    shown: str | None = None
    # A field every Settings must be given (load() still has the default).
    required: bool = False
    # Listed by `jetdbt up --help`.
    stack: bool = False
    read_by: str = "shared/process/config.py"

    def value(self, env) -> Any:
        """The setting's value in `env`; unset or empty, its default."""
        raw = env.get(self.name)
        raw = self.default if raw in (None, "") else raw
        return None if raw is None else self.read(self.name, raw)

    @property
    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        return "unset" if self.default in (None, "") else self.default


_STACK, _RUNS, _SANDBOX, _ENGINES = "The stack", "Runs", "The sandbox", "Engines and packages"
_WAREHOUSES, _CLI, _HOOKS = "Warehouses and secrets", "The CLI", "Webhooks"

DECLARED: tuple[Setting, ...] = (
    Setting("JETDBT_HOME", "home", Path, ".jetdbt", "the embedded servers' data, access files,"
            " warehouse and job folders", _STACK, _path, shown="./.jetdbt", required=True,
            stack=True),
    Setting("NATS_URL", "nats_url", str | None, None, "a NATS server to use instead (>= 2.10 with"
            " JetStream; a cluster's, comma-separated)", _STACK,
            shown="none: an embedded nats-server", required=True, stack=True),
    Setting("DATABASE_URL", "database_url", str | None, None, "a Postgres to use instead (a"
            " runner never connects to it, and refuses a warehouse on its database)",
            _STACK, shown="none: an embedded Postgres", required=True, stack=True),
    Setting("JETDBT_API_HOST", "api_host", str, "127.0.0.1", "the API's and viewer's address",
            _STACK, stack=True),
    Setting("JETDBT_API_PORT", "api_port", int, "8580", "the API's port (0: any free port)",
            _STACK, _whole, stack=True),
    Setting("JETDBT_MCP_PORT", "mcp_port", int | None, None, "the MCP server's port (streamable"
            " HTTP)", _STACK, _whole, shown="API port + 1", stack=True),
    Setting("JETDBT_SCHEMA", "schema", str, "jetdbt", "the projections' Postgres schema", _STACK,
            stack=True),
    Setting("JETDBT_STREAM_REPLICAS", "stream_replicas", int, "1", "the replicas of every stream"
            " and bucket, which the contract creates or raises to (3 in a 3-node cluster); a"
            " service whose server holds fewer says so at start", _STACK, _replicas),
    Setting("JETDBT_PUBLIC_URL", "public_url", str, "", "the base URL of the links a webhook's"
            " body carries (viewer, api)", _STACK, _base_url, shown="the API's own address"),
    Setting("JETDBT_RUNNER_NAME", "runner_name", str | None, None, "this process's name: a"
            " runner's in events and logs, a projector's in /healthz and /metrics", _STACK,
            shown="host:pid"),
    Setting("JETDBT_PROJECTOR_LEASE_SECONDS", "projector_lease_seconds", float, "5", "how long"
            " a projector process that stopped renewing its lease stays active before a standby"
            " takes over (at most 30)", _STACK, _number(0.5, "seconds", most=30.0)),
    Setting("JETDBT_STACKS_DIR", None, Path | None, None, "where this user's running `jetdbt up`s"
            " record themselves, so a CLI in any folder finds one", _STACK,
            shown="$XDG_STATE_HOME/jetdbt/stacks, else ~/.local/state/jetdbt/stacks"),
    Setting("MAX_CONCURRENT_RUNS", "max_concurrent_runs", int, "4", "runs at once, over every"
            " runner (run slots in DBT_LEASES)", _RUNS, _whole, stack=True),
    Setting("MAX_RUNS_PER_TEAM", "max_runs_per_team", int, "2", "runs at once of one team (so no"
            " team takes every run slot)", _RUNS, _whole, stack=True),
    Setting("MAX_RUNS_PER_RUNNER", "max_runs_per_runner", int, "0", "runs one runner builds at"
            " once; a run whose turn comes while its runner is full goes back for another"
            " runner (0: no cap)", _RUNS, _whole, shown="0: no cap"),
    Setting("MAX_QUEUED_RUNS_PER_TEAM", "max_queued_runs_per_team", int, "20", "runs of one"
            " team waiting to start at once, over every runner; past it a run is refused",
            _RUNS, _positive, stack=True),
    Setting("SCHEDULE_MIN_INTERVAL_SECONDS", "schedule_min_interval_seconds", int, "60", "the"
            " shortest time between two fires of a schedule; a shorter one is refused", _RUNS,
            _positive),
    Setting("RUN_TIMEOUT_SECONDS", "run_timeout_seconds", int, "3600", "the longest a run may"
            " take, all its invocations together", _RUNS, _whole, stack=True),
    Setting("RUN_ACK_WAIT_SECONDS", "run_ack_wait_seconds", int, "60", "how long a silent runner"
            " keeps a run before redelivery (the `runners` consumer's ack wait, set by whoever"
            " applies the contract)", _RUNS, _whole),
    Setting("RUN_RETENTION", "run_retention", int, "30", "finished runs per project and"
            " environment that keep their log object and files", _RUNS, _positive),
    Setting("EXTERNAL_PUBLISHES_PER_MINUTE", "external_publishes_per_minute", int, "120", "an"
            " external system's commands and declared writes a runner handles a minute (the log"
            " is never purged: one principal's share of it is bounded)", _RUNS, _positive),
    Setting("JETDBT_SANDBOX", "sandbox", bool, "on", "`off` runs dbt without the sandbox (the"
            " runner's start line and /healthz say so)", _SANDBOX, _switch),
    Setting("JETDBT_SANDBOX_UID", "sandbox_uid", int, "65534", "the uid a root runner's dbt"
            " processes run as", _SANDBOX, _whole),
    Setting("RUN_MEMORY", "run_memory", int, "2g", "memory of each dbt invocation (its own"
            " cgroup)", _SANDBOX, _bytes, stack=True),
    Setting("RUN_CPUS", "run_cpus", float, "2", "CPUs of each dbt invocation (its own cgroup)",
            _SANDBOX, _number(0.01, "CPUs")),
    Setting("RUN_PIDS", "run_pids", int, "1024", "processes and threads of each dbt invocation"
            " (its own cgroup's pids.max)", _SANDBOX, _positive),
    Setting("RUN_DISK", "run_disk", int, "4g", "what each job folder may hold: its project,"
            " dbt's target and logs (a filesystem of its own when the runner is root)", _SANDBOX,
            _bytes, stack=True),
    Setting("JETDBT_CGROUP", "cgroup", Path | None, None, "an operator's delegated cgroup v2"
            " folder the invocations' groups are made in", _SANDBOX, _path,
            shown="cgroup v1's controllers, or the runner's own v2 group"),
    Setting("JETDBT_SANDBOX_READ", "sandbox_read", tuple[Path, ...], "", "folders every run may"
            " read besides its job, comma-separated (JETDBT_HOME stays hidden inside them)",
            _SANDBOX, _paths),
    Setting("JETDBT_EGRESS_HOSTS_FILE", "egress_hosts_file", Path | None, None, "a file in"
            " hosts format the egress gate reads before DNS (private endpoints; tests' stand-ins)",
            _SANDBOX, _path),
    Setting("JETDBT_ENGINES_DIR", "engines_dir", Path | None, None, "where an operator placed"
            " engine binaries (`<engine>/dbt`: dbt-core-2x, fusion)", _ENGINES, _path),
    Setting("JETDBT_DEFAULT_ENGINE", "default_engine", str, ENGINES[0], "the engine of a project"
            " whose jetdbt.yaml names none (one of " + ", ".join(ENGINES) + ")", _ENGINES,
            _engine),
    Setting("DBT_CORE_1X_FLOOR", "dbt_core_floor", str, "1.10", "the lowest dbt-core an"
            " adapter's engine environment resolves", _ENGINES, _version),
    Setting("DBT_CORE_1X_CEILING", "dbt_core_ceiling", str, "1.12", "the dbt-core an adapter's"
            " engine environment stays below", _ENGINES, _version),
    Setting("JETDBT_EXTRA_ADAPTERS", "extra_adapters", tuple[str, ...], "", "adapters beyond the"
            " known ones an operator trusts to install, comma-separated", _ENGINES, _names),
    Setting("JETDBT_ENVIRONMENTS_DIR", "environments_dir", Path | None, None, "where engine"
            " environments are kept", _ENGINES, _path, shown="JETDBT_HOME/environments"),
    Setting("JETDBT_ENVIRONMENT_IDLE_SECONDS", "environment_idle_seconds", int, "600", "how long"
            " an idle engine environment's warm dbt stays up", _ENGINES, _positive),
    Setting("DBT_PACKAGE_HUB_URL", None, str | None, None, "dbt's own setting: an operator's"
            " mirror of the package hub, handed to `dbt deps` alone", _ENGINES,
            shown="dbt's hub", read_by="services/runner/process/dbt_env.py"),
    Setting("JETDBT_WAREHOUSES", "warehouses_file", Path | None, None, "the warehouses file: the"
            " runners' connections and the teams each is granted, which the API checks runs"
            " against too (docs/guide.md)", _WAREHOUSES, _path,
            shown="none: DuckDB in JETDBT_HOME", stack=True),
    Setting("JETDBT_VARIABLES", "variables_file", Path | None, None, "the variables `$var:PATH`"
            " references resolve from", _WAREHOUSES, _path),
    Setting("JETDBT_ENV_REFERENCES", "env_references", tuple[str, ...], "", "environment names a"
            " project's descriptor may reference (`$env:NAME`), comma-separated; `X_*` is a"
            " prefix", _WAREHOUSES, _names),
    Setting("NATS_USER", "nats_user", str | None, None, "who this process is on NATS", _CLI,
            shown="what `jetdbt up` generated under JETDBT_HOME/access"),
    Setting("NATS_PASSWORD", "nats_password", Secret | None, None, "its NATS password",
            _CLI, _secret),
    Setting("JETDBT_TOKEN", "token", Secret | None, None, "the API token the CLI and `jetdbt mcp`"
            " send", _CLI, _secret, shown="the admin token `jetdbt up` generated"),
    Setting("JETDBT_PRINCIPAL", "principal", str | None, None, "whom the CLI's commands speak for"
            " (only an operator's NATS user may name any principal)", _CLI,
            shown="the login name"),
    Setting("NO_COLOR", None, str | None, None, "any value: plain output, no colours or live"
            " area (as for a pipe)", _CLI, read_by="services/cli/watch.py"),
    Setting("JETDBT_WEBHOOK_HOSTS", "webhook_hosts", tuple[str, ...], "", "the hosts a hook's"
            " URL may name, comma-separated (`*.example.com`; `*` any public host; loopback and"
            " private addresses only when listed by name)", _HOOKS, _hosts,
            shown="none: no hook may be added"),
    Setting("JETDBT_WEBHOOK_ATTEMPTS", "webhook_attempts", int, "5", "the attempts of one"
            " delivery", _HOOKS, _positive),
    Setting("JETDBT_WEBHOOK_RETRY_SECONDS", "webhook_retry_seconds", float, "2", "the first"
            " retry's delay, doubled each time", _HOOKS, _number(0.0, "seconds")),
)  # fmt: skip

# Variables the code reads that are not jetdbt's settings: each name (or `PREFIX_*`) and why.
NOT_SETTINGS = {
    "JETDBT_FUZZ_EXAMPLES": "tests: the fuzz properties' examples each (`make fuzz` sets 10000)",
    "JETDBT_CONTRACT_EXAMPLES": "tests: the API contract test's examples (schemathesis)",
    "JETDBT_RETENTION_FULL": "tests: 1 runs the retention test at full size",
    "JETDBT_SCREENS": "tests: a folder where test_terminal.py saves the screens it drew",
    "PYTEST_XDIST_WORKER": "pytest-xdist's: which worker runs a test",
    "JETDBT_BENCH_*": "benchmarks: sizes and repetitions (docs/performance.md)",
    "JETDBT_SCALE_*": "bench/bench_scale.py: sizes and repetitions (docs/performance.md)",
    "JETDBT_FLEET_*": "bench/bench_fleet.py: teams, projects, runs, runners (docs/performance.md)",
    "UV_*": "uv's own settings, handed to uv when it provisions an engine environment",
    "PIP_*": "pip's index settings, handed to uv under uv's names",
    "PATH": "the platform's: where programs are found (dbt gets it, as the locale and proxies)",
    "VIRTUAL_ENV": "the platform's: the active virtual environment (a fresh machine has none)",
    "XDG_STATE_HOME": "the platform's: where JETDBT_STACKS_DIR is by default",
    "XDG_RUNTIME_DIR": "the platform's: made for the embedded Postgres when missing",
    "TERM": "the terminal's: `dumb` gets plain output, as NO_COLOR does",
    "_ARGCOMPLETE": "argcomplete's: the shell asking for completions",
}


def _struct_field(setting: Setting) -> tuple:
    if setting.required:
        return (setting.field, setting.type)
    default = None if setting.default is None else setting.read(setting.name, setting.default)
    return (setting.field, setting.type, default)


class _Derived(msgspec.Struct, frozen=True, kw_only=True):
    """What follows from the settings: folders under JETDBT_HOME, the MCP server's port."""

    @property
    def engine_environments(self) -> Path:
        """JETDBT_ENVIRONMENTS_DIR, else JETDBT_HOME/environments."""
        return self.environments_dir or self.home / "environments"

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
    def process_name(self) -> str:
        """JETDBT_RUNNER_NAME, else host:pid: who this process is in events, logs, /healthz."""
        return self.runner_name or f"{socket.gethostname()}:{os.getpid()}"

    @property
    def runner_cache(self) -> Path:
        return self.home / "runner"


# The settings as one typed Struct: a field per declaration that fills one, in DECLARED's order.
Settings = msgspec.defstruct(
    "Settings",
    [_struct_field(s) for s in DECLARED if s.field is not None],
    bases=(_Derived,),
    module=__name__,
    frozen=True,
    kw_only=True,
)

# The settings a person starting `jetdbt up` most often changes, for its --help: name, default.
STACK_SETTINGS = tuple((s.name, s.default_text, s.meaning) for s in DECLARED if s.stack)


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
    return Settings(**{s.field: s.value(env) for s in DECLARED if s.field is not None})


def settings_table() -> str:
    """Every declared setting, by group, as the Markdown docs/operations.md shows."""
    parts = []
    for group in dict.fromkeys(s.group for s in DECLARED):
        rows = [
            f"| `{s.name}` | {s.default_text} | {s.meaning}"
            + ("" if s.read_by == "shared/process/config.py" else f" (read by `{s.read_by}`)")
            + " |"
            for s in DECLARED
            if s.group == group
        ]
        header = f"**{group}**\n\n| setting | default | what |\n|---|---|---|\n"
        parts.append(header + "\n".join(rows))
    outside = "\n".join(f"- `{name}`: {why}" for name, why in NOT_SETTINGS.items())
    parts.append("Read by the code, and no setting of jetdbt's:\n\n" + outside)
    return "\n\n".join(parts) + "\n"


def generated(text: str, name: str, body: str) -> str:
    """`text` with what stands between its `<!-- generated: NAME -->` and
    `<!-- end generated: NAME -->` lines replaced by `body` (the docs' generated tables)."""
    name = re.escape(name)
    pattern = re.compile(
        rf"(<!-- generated: {name} [^\n]*-->\n).*?(<!-- end generated: {name} -->)", re.S
    )
    if not pattern.search(text):
        raise LookupError(f"no <!-- generated: {name} ... --> markers")
    return pattern.sub(lambda m: m[1] + "\n" + body + "\n" + m[2], text, count=1)


OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

if __name__ == "__main__":
    OPERATIONS_DOC.write_text(generated(OPERATIONS_DOC.read_text(), "settings", settings_table()))

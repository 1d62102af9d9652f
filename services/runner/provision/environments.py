"""Engine environments: the dbt-core and adapter a project needs, provisioned on first use.

The environment jetdbt is installed in serves, pre-staged, the adapters it holds (dbt-duckdb
and dbt-postgres). Any other adapter gets a virtual environment of its own the first time
a project needs it: uv resolves dbt-core within DBT_CORE_1X_FLOOR/DBT_CORE_1X_CEILING
together with dbt-<adapter> (so an adapter that caps below the newest core still
provisions) from the operator's package index, as the environment configures it (uv's own
UV_* settings, or pip's PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and PIP_FIND_LINKS). It is kept
under JETDBT_HOME/environments (JETDBT_ENVIRONMENTS_DIR), keyed by adapter, range and
Python, with its lock: the exact version of every package in it, which a deploy records.

Installing a package runs its code, so only the adapters jetdbt knows and those an
operator lists in JETDBT_EXTRA_ADAPTERS are installed, from wheels only (`--no-build`: no
package's build code runs while provisioning), and uv sees only its index settings (never
the runner's credentials, nor an index URL on its command line). Concurrent first uses
install once (a file lock); an environment is built in a temporary folder and renamed into
place only when complete, so a failed or interrupted install is never used. A failed one
is remembered for FAILED_RETRY_SECONDS: repeated deploys and runs get its reason again
instead of each running the resolver.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import msgspec
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.process.config import Settings
from jetdbt.shared.wording.short_quote import shorten

__all__ = [
    "KNOWN_ADAPTERS",
    "EngineEnvironment",
    "EnvironmentUnavailable",
    "ensure",
]

# The adapters jetdbt knows the packages of; any other needs JETDBT_EXTRA_ADAPTERS.
KNOWN_ADAPTERS = frozenset(
    {
        "athena", "bigquery", "clickhouse", "databricks", "duckdb", "fabric", "mysql",
        "oracle", "postgres", "redshift", "snowflake", "spark", "sqlite", "sqlserver",
        "synapse", "trino",
    }
)  # fmt: skip
INSTALL_TIMEOUT = 1800
FAILED_RETRY_SECONDS = 300
# Provisioning (and waiting on another's) has threads of its own: however many adapters
# projects name at once, the runner's other blocking work keeps the default executor.
_PROVISIONING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="provision")
LOCK_FILE = "jetdbt-lock.json"
# A refusal carries the resolver's explanation whole up to this many characters: uv's chain
# of causes for dbt-mysql (which pins dbt-core 1.7) is 122 lines, 5.2 KB.
EXPLANATION_CHARS = 8000


class EnvironmentUnavailable(RuntimeError):
    """No environment can serve the adapter; the message names it and why."""


class EngineEnvironment(msgspec.Struct, frozen=True, kw_only=True):
    """One provisioned environment: its folder, its lock, how long its warm dbt idles."""

    adapter: str
    root: str
    lock: dict[str, str]
    idle_seconds: int = 600

    @property
    def python(self) -> str:
        return str(Path(self.root) / "bin" / "python")

    def version(self, package: str) -> str:
        return self.lock.get(package, "unknown")


def _installed_here(adapter: str) -> bool:
    try:
        metadata.version(f"dbt-{adapter}")
    except metadata.PackageNotFoundError:
        return False
    return True


async def ensure(settings: Settings, adapter: str) -> EngineEnvironment | None:
    """The environment that runs `adapter`: None for jetdbt's own, else one provisioned
    (on first use) and cached. Raises EnvironmentUnavailable naming the adapter and the
    setting or the resolver's message."""
    if _installed_here(adapter):
        return None
    if adapter not in KNOWN_ADAPTERS | set(settings.extra_adapters):
        raise EnvironmentUnavailable(
            f"adapter {adapter!r} is not one this runner may install (dbt-{adapter}): an"
            f" operator trusts it by adding {adapter} to JETDBT_EXTRA_ADAPTERS"
        )
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_PROVISIONING, _provisioned, settings, adapter)


def _requirements(settings: Settings, adapter: str) -> list[str]:
    core = f"dbt-core>={settings.dbt_core_floor},<{settings.dbt_core_ceiling}"
    return [core, f"dbt-{adapter}"]


def _provisioned(settings: Settings, adapter: str) -> EngineEnvironment:
    key = msgspec.json.encode([_requirements(settings, adapter), list(sys.version_info[:2])])
    name = f"{adapter}-{digest_of(key)[7:19]}"
    base = settings.engine_environments
    root = base / name
    found = _load(root, adapter, settings)
    if found is not None:
        return found
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f".{name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one install; the others wait, then find it
        found = _load(root, adapter, settings)
        if found is not None:
            return found
        env = uv_env(dict(os.environ))
        # Keyed by the index too: an operator who fixes the index is not kept waiting.
        failed = base / f".{name}.{digest_of(msgspec.json.encode(env))[7:19]}.failed"
        with contextlib.suppress(OSError):
            if time.time() - failed.stat().st_mtime < FAILED_RETRY_SECONDS:
                raise EnvironmentUnavailable(
                    f"{failed.read_text()}\n(the last attempt, less than"
                    f" {FAILED_RETRY_SECONDS}s ago: not tried again before then)"
                )
        staging = base / f".{name}.{uuid.uuid4().hex}"
        try:
            lock = _install(staging, _requirements(settings, adapter), adapter, env)
            (staging / LOCK_FILE).write_bytes(msgspec.json.encode(lock))
            staging.rename(root)
        except EnvironmentUnavailable as exc:
            failed.write_text(str(exc))
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _load(root, adapter, settings)


def _load(root: Path, adapter: str, settings: Settings) -> EngineEnvironment | None:
    try:
        lock = msgspec.json.decode((root / LOCK_FILE).read_bytes(), type=dict[str, str])
    except (OSError, msgspec.DecodeError):
        return None
    return EngineEnvironment(
        adapter=adapter,
        root=str(root),
        lock=lock,
        idle_seconds=settings.environment_idle_seconds,
    )


def _uv() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


# What uv may see of the runner's environment: where to find packages (and the TLS and
# proxy settings to reach them), its cache, nothing else.
_UV_INHERITED = ("PATH", "HOME", "XDG_CACHE_HOME", "LANG", "SSL_CERT_FILE", "SSL_CERT_DIR",
                 "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                 "no_proxy")  # fmt: skip
# pip's index settings, for an operator who configured pip's instead of uv's: uv's names.
_FROM_PIP = {"PIP_INDEX_URL": "UV_INDEX_URL", "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
             "PIP_FIND_LINKS": "UV_FIND_LINKS"}  # fmt: skip
# A uv setting that already says the same as pip's, which then stays unused.
_SAME = {"UV_INDEX_URL": ("UV_INDEX_URL", "UV_DEFAULT_INDEX"),
         "UV_EXTRA_INDEX_URL": ("UV_EXTRA_INDEX_URL", "UV_INDEX")}  # fmt: skip


def uv_env(environ: dict[str, str]) -> dict[str, str]:
    """uv's whole environment: its own UV_* settings, pip's index settings under uv's names,
    and _UV_INHERITED. Index URLs (which may carry credentials) go here, never into argv."""
    env = {k: environ[k] for k in _UV_INHERITED if environ.get(k)}
    env |= {k: v for k, v in environ.items() if k.startswith("UV_") and v}
    for pip, uv in _FROM_PIP.items():
        if environ.get(pip) and not any(env.get(k) for k in _SAME.get(uv, (uv,))):
            value = environ[pip]
            env[uv] = ",".join(value.split()) if uv == "UV_FIND_LINKS" else value
    return env


def _install(
    staging: Path, requirements: list[str], adapter: str, env: dict[str, str]
) -> dict[str, str]:
    """A complete environment in `staging` and its lock; raises EnvironmentUnavailable."""
    uv, python = _uv(), str(staging / "bin" / "python")
    _uv_step(adapter, env, [uv, "venv", "--quiet", "--relocatable", "--python", sys.executable,
                            str(staging)])  # fmt: skip
    _uv_step(adapter, env, [uv, "pip", "install", "--quiet", "--no-build", "--python", python,
                            *requirements])  # fmt: skip
    frozen = _uv_step(adapter, env, [uv, "pip", "freeze", "--python", python])
    _add_rehearsal(uv, python, staging, frozen, env)
    frozen = _uv_step(adapter, env, [uv, "pip", "freeze", "--python", python])
    lock = {}
    for line in frozen.splitlines():
        package, _, version = line.partition("==")
        if version:
            lock[package.strip().lower()] = version.strip()
    return lock


def _add_rehearsal(uv: str, python: str, staging: Path, frozen: str, env: dict[str, str]) -> None:
    """dbt-duckdb beside the adapter, held to what the adapter resolved (a constraint, so it
    moves nothing): the warm dbt rehearses a DuckDB build before it forks anything
    (forkserver.py), which every child would otherwise pay for again. Best effort: where
    it does not fit, the environment serves without it."""
    if "dbt-duckdb==" in frozen:
        return
    pinned = staging / "jetdbt-resolved.txt"
    pinned.write_text(frozen)
    with contextlib.suppress(EnvironmentUnavailable):
        _uv_step("duckdb", env, [uv, "pip", "install", "--quiet", "--no-build", "--python",
                                 python, "dbt-duckdb", "--constraint", str(pinned)])  # fmt: skip


def _uv_step(adapter: str, env: dict[str, str], argv: list[str]) -> str:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentUnavailable(
            f"adapter {adapter!r}: its environment could not be installed: uv did not finish"
            f" within {INSTALL_TIMEOUT}s"
        ) from None
    except OSError as exc:
        raise EnvironmentUnavailable(
            f"adapter {adapter!r}: its environment could not be installed: {exc.strerror}"
        ) from None
    if done.returncode != 0:
        raise EnvironmentUnavailable(
            f"adapter {adapter!r}: installing dbt-{adapter} failed; the resolver said:\n"
            + explanation(done.stderr)
        )
    return done.stdout


def explanation(stderr: str, limit: int = EXPLANATION_CHARS) -> str:
    """What uv said of a failure, whole: its last `error:` line and every line after it (the
    causes, the conclusion, the hints), so a reader sees the chain from its first link. One
    longer than `limit` keeps that first line and the last lines that fit (the conclusion
    and the remedy come last), saying how many lines it left out between them."""
    lines = stderr.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith(("error:", "×"))]
    lines = lines[starts[-1] :] if starts else lines
    text = "\n".join(lines)
    if len(text) <= limit or len(lines) == 1:
        return shorten(text, limit)
    head, room, tail = shorten(lines[0], limit // 4), limit - limit // 4, []
    for line in reversed(lines[1:]):
        if len(line) >= room:
            break
        tail.insert(0, line)
        room -= len(line) + 1
    tail = tail or [shorten(lines[-1], room)]
    return "\n".join([head, f"  …({len(lines) - 1 - len(tail)} lines left out)…", *tail])


def code_shim(environment: EngineEnvironment) -> Path:
    """A folder holding only jetdbt's `services` package (`jetdbt/services`, a link to this
    install's), for the environment's warm dbt: PYTHONPATH at it reaches jetdbt's fork server
    and never the runner's own site-packages (which would shadow the environment's dbt)."""
    from jetdbt import services

    shim = Path(environment.root) / "jetdbt-code"
    (shim / "jetdbt").mkdir(parents=True, exist_ok=True)
    link = shim / "jetdbt" / "services"
    target = str(Path(services.__file__).resolve().parent)
    with contextlib.suppress(OSError):
        if os.readlink(link) == target:
            return shim
    staging = shim / f".{uuid.uuid4().hex}"
    os.symlink(target, staging)
    os.replace(staging, link)
    return shim

"""The environment a dbt process sees: an allowlist of the runner's own, the run's resolved
variables, and the runner's dbt settings last. Its own module (as dagster-dbt's dbt_env):
the invocation, the fork server and the sandbox's probe all build it, none from another."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jetdbt.services.runner.provision.environments import EngineEnvironment

__all__ = ["RUNNER_SETTINGS", "dbt_env", "package_hub", "sealed_environment"]

_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
# What dbt may see of the runner's own environment: locale, time zone, the search
# path, TLS/proxy settings a warehouse connection may need. Never the runner's
# credentials (NATS, Postgres, tokens): those are simply not on this list; nor the
# operator's hub mirror (package_hub), which only `dbt deps` is handed.
_INHERITED = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    *_PROXIES,
)


def package_hub() -> dict[str, str]:
    """The operator's mirror of dbt's package hub (DBT_PACKAGE_HUB_URL, dbt's setting), for
    `dbt deps` alone: a run's models never see it (nor credentials its URL may carry)."""
    hub = os.environ.get("DBT_PACKAGE_HUB_URL")
    return {"DBT_PACKAGE_HUB_URL": hub} if hub else {}


# The only dbt flag variables a dbt process gets: the runner's. Any other (DBT_EMPTY,
# DBT_STATE, DBT_TARGET_PATH...) would be a flag no argument list shows; the fork server
# drops them, knowing them from dbt's own command line.
RUNNER_SETTINGS = {
    # No call home from a runner: no usage stats, no version check over the network.
    "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    "DBT_VERSION_CHECK": "false",
    "DO_NOT_TRACK": "1",
    # Plain text on stdout: it becomes the human-readable run log.
    "DBT_USE_COLORS": "false",
}


def dbt_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allowlist of the runner's environment plus the run's own resolved variables."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.update(extra or {})
    env.update(RUNNER_SETTINGS)  # last: a project's env never overrides them
    return env


def sealed_environment(environment: EngineEnvironment | None = None) -> dict[str, str]:
    """The fork server's own environment: the allowlist dbt may see, and what Python needs
    to find jetdbt's code (and, in an engine environment, that environment's dbt alone)."""
    # No proxy (its URL may hold the operator's login): the server opens no connection, and
    # what it starts with every child can read in /proc/self/environ, sandboxed or not.
    env = {k: v for k, v in dbt_env().items() if k not in _PROXIES}
    if environment is not None:
        from jetdbt.services.runner.provision.environments import code_shim

        env["PYTHONPATH"] = str(code_shim(environment))
        env["VIRTUAL_ENV"] = environment.root
        return env
    for name in ("PYTHONPATH", "VIRTUAL_ENV"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env

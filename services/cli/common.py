"""What every command group shares: where the stack is, a bus to it, the API, errors and exit
codes. Light on purpose: `jetdbt status` imports this and must start fast, so nats and
aiohttp are imported only by what uses them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jetdbt.services.stack.stack_file import read_stack_file, running_homes
from jetdbt.shared.process.config import Settings

if TYPE_CHECKING:
    from jetdbt.shared.bus.connection import Bus

__all__ = [
    "EXIT_FAILED",
    "EXIT_REFUSED",
    "ApiAnswered",
    "CliError",
    "endpoints",
    "located",
    "open_bus",
    "api_call",
    "api_json",
    "database_url",
]

EXIT_FAILED = 1
EXIT_REFUSED = 3


class CliError(Exception):
    """An error the user can act on; printed without a traceback."""


class ApiAnswered(CliError):
    """The API answered, but not with a 200: `status` is its code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def located(settings: Settings, home_given: bool) -> Settings:
    """The settings of the stack this command talks to. With no NATS_URL, and no JETDBT_HOME
    given or a `jetdbt up` running in this folder, the one stack this user runs anywhere on
    the machine (its JETDBT_HOME holds the stack file and the access files alike)."""
    if settings.nats_url or home_given or read_stack_file(settings.home) is not None:
        return settings
    homes = running_homes()
    if len(homes) != 1:
        return settings
    import msgspec

    return msgspec.structs.replace(settings, home=homes[0])


def _not_running(settings: Settings) -> str:
    """What to do when no stack answers: where one was looked for, and what to set."""
    homes = running_homes()
    if len(homes) > 1:
        listed = ", ".join(f"JETDBT_HOME={home}" for home in homes)
        return f"{len(homes)} jetdbt stacks are running on this machine: set one of {listed}"
    start = "`jetdbt up` in another terminal"
    if (Path.cwd() / "dbt_project.yml").exists():
        # Its data would land in this project's folder: start it somewhere else.
        start = (
            "`jetdbt up` in another terminal, from a folder that is not a dbt project"
            " (it keeps its data in that folder's .jetdbt/)"
        )
    return (
        f"no jetdbt stack is running for JETDBT_HOME={settings.home} or anywhere else on"
        f" this machine: start one with {start}, set JETDBT_HOME to a running stack's"
        " folder, or set NATS_URL for a remote one"
    )


def endpoints(settings: Settings) -> tuple[str, str]:
    """Where the stack is: NATS_URL (and the API setting), else what `jetdbt up` wrote."""
    if settings.nats_url:
        return settings.nats_url, f"http://{settings.api_host}:{settings.api_port}"
    found = read_stack_file(settings.home)
    if not found:
        raise CliError(_not_running(settings))
    return found["nats_url"], found["api_url"]


async def open_bus(settings: Settings) -> Bus:
    from jetdbt.services.access.local import cli_nats_login
    from jetdbt.shared.bus.connection import connect

    nats_url, _ = endpoints(settings)
    user, password = cli_nats_login(settings)
    return await connect(nats_url, "jetdbt-cli", ensure=False, user=user, password=password)


def _api_headers(settings: Settings) -> dict[str, str]:
    """What every API request carries: JETDBT_TOKEN, else the admin token `jetdbt up` made."""
    from jetdbt.services.access.local import cli_token

    token = cli_token(settings)
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return {"Accept": "application/json", **auth}


def api_call(
    settings: Settings,
    path: str,
    *,
    method: str = "GET",
    body: bytes | None = None,
    media: str = "application/json",
    api_url: str | None = None,
    timeout: float = 30.0,
) -> tuple[int, bytes]:
    """`method path` on the query API (`api_url`, else the stack's): the CLI's one HTTP call,
    on http.client (aiohttp costs `jetdbt status` a quarter of a second to import,
    urllib.request a tenth). No proxy: the API is the stack's own. `body` is sent as `media`."""
    import http.client
    from urllib.parse import urlsplit

    api_url = api_url or endpoints(settings)[1]
    url = urlsplit(api_url)
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = kind(url.hostname or "127.0.0.1", url.port, timeout=timeout)
    headers = _api_headers(settings) | ({"Content-Type": media} if body is not None else {})
    try:
        conn.request(method, url.path.rstrip("/") + path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise CliError(f"the API at {api_url} did not answer: {exc}") from None
    finally:
        conn.close()


def api_json(settings: Settings, path: str, timeout: float = 30.0, **call):
    """`path`'s answer decoded from JSON (`call`: api_call's method, body...); any answer but
    a 2xx is one CliError in one format, the API's own reason quoted: `GET PATH: 401 invalid
    token ...`."""
    import msgspec

    status, body = api_call(settings, path, timeout=timeout, **call)
    try:
        answer = msgspec.json.decode(body)
    except msgspec.DecodeError:
        answer = None
    if 200 <= status < 300 and answer is not None:
        return answer
    reason = answer.get("error") if isinstance(answer, dict) else None
    reason = reason or body.decode(errors="replace")[:200]
    hint = {
        401: "; set JETDBT_TOKEN to a token of this stack (`jetdbt token create`)",
        403: "; ask an admin for a token that covers it",
    }.get(status, "")
    method = call.get("method", "GET")
    raise ApiAnswered(f"{method} {path}: {status} {reason}{hint}", status)


def database_url(settings: Settings) -> str:
    """DATABASE_URL, else the embedded Postgres that `jetdbt up` started."""
    found = settings.database_url or (read_stack_file(settings.home) or {}).get("database_url")
    if not found:
        raise CliError(
            "this command works on Postgres directly: set DATABASE_URL (and JETDBT_SCHEMA)"
        )
    return found

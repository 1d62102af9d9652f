"""What every command group shares: where the stack is, a bus to it, errors and exit codes."""

from __future__ import annotations

import asyncio
import signal

from services.stack import read_stack_file
from shared.bus import Bus, connect
from shared.config import Settings

__all__ = [
    "EXIT_FAILED",
    "EXIT_REFUSED",
    "CliError",
    "endpoints",
    "open_bus",
    "database_url",
    "wait_for_signal",
]

EXIT_FAILED = 1
EXIT_REFUSED = 3


class CliError(Exception):
    """An error the user can act on; printed without a traceback."""


def endpoints(settings: Settings) -> tuple[str, str]:
    """Where the stack is: NATS_URL (and the API setting), else what `jetdbt up` wrote."""
    if settings.nats_url:
        return settings.nats_url, f"http://{settings.api_host}:{settings.api_port}"
    found = read_stack_file(settings.home)
    if not found:
        raise CliError(
            f"no jetdbt stack is running for {settings.home}: start one with `jetdbt up`"
            " in another terminal, or set NATS_URL"
        )
    return found["nats_url"], found["api_url"]


async def open_bus(settings: Settings) -> Bus:
    nats_url, _ = endpoints(settings)
    return await connect(nats_url, "jetdbt-cli", ensure=False)


async def wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too: closing the terminal that runs `jetdbt up` stops what it started.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def database_url(settings: Settings) -> str:
    """DATABASE_URL, else the embedded Postgres that `jetdbt up` started."""
    found = settings.database_url or (read_stack_file(settings.home) or {}).get("database_url")
    if not found:
        raise CliError(
            "this command works on Postgres directly: set DATABASE_URL (and JETDBT_SCHEMA)"
        )
    return found

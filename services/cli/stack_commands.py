"""Commands that run services: the whole stack locally (`up`), one role (`serve`), the demo."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import shlex
import shutil
import signal
import sys

from jetdbt.services.cli.common import CliError
from jetdbt.services.stack.composition import DATABASE_ROLES, ROLES, Stack, StackFailed
from jetdbt.shared.bus.connection import shown
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_up", "cmd_serve", "cmd_demo"]

# Ctrl-C, a service manager's stop, and the terminal window closing (SIGHUP).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_requested() -> asyncio.Event:
    """An event set by the first stop signal; installed before anything starts, so a signal
    that comes while the servers are starting still stops them once they are up."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if sig == signal.SIGHUP:
            _leave_terminal()
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    return stop


def _leave_terminal() -> None:
    """The terminal is gone: a write to it would fail (EIO) halfway through stopping the
    servers, so whatever is still said goes nowhere."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def _told(announce, stack: Stack) -> None:
    """Announce the stack; a terminal closed while it is told (EIO, its hang-up on the
    way) is the same as one closed after, never an error that ends `up` with exit 1."""
    try:
        announce(stack)
    except OSError as exc:
        if exc.errno not in (errno.EIO, errno.EPIPE):
            raise
        _leave_terminal()


async def _serve(stack: Stack, stop: asyncio.Event, announce=None) -> int:
    """Start `stack`, announce it, serve until a stop signal, then stop all it started."""
    try:
        await stack.start()
    except StackFailed as exc:
        raise CliError(str(exc)) from None
    _freeze_started_heap()
    try:
        if announce and not stop.is_set():
            _told(announce, stack)
        await stop.wait()
    finally:
        await stack.stop()
    return 0


def _freeze_started_heap() -> None:
    """Leave what starting made (imports, config, connections) out of the collector's
    full collections, which then walk only what serving allocates: at 5,000 models a full
    collection of the started heap held every third first answer of the graph 100 ms
    (bench/bench_scale.py)."""
    gc.collect()
    gc.freeze()


def _program() -> str:
    """How this shell reaches `jetdbt`: its name when PATH finds this very script, else the
    path it was started by (`.venv/bin/jetdbt`), so a command line shown works as written."""
    started = os.path.abspath(sys.argv[0])
    on_path = shutil.which("jetdbt")
    return "jetdbt" if on_path and os.path.abspath(on_path) == started else sys.argv[0]


def _announce_up(stack: Stack) -> None:
    from jetdbt.services.access.local import admin_token_file
    from jetdbt.services.cli.client import principal

    stack.write_stack_file()
    jetdbt = _program()
    print(f"jetdbt is up: API {stack.api_url}  NATS {shown(stack.nats_url)}", flush=True)
    print(f"run viewer: {stack.api_url}/ui/ (it asks for an API token)")
    token_file = admin_token_file(stack.settings.home)
    if token_file.exists():
        print(f"  the admin token is in {token_file}")
    print(
        f"  a token of your own: {jetdbt} token create --principal {shlex.quote(principal())}"
        " --team default --role runner"
    )
    print(f"MCP for agents: {stack.mcp_url} (streamable HTTP), or `{jetdbt} mcp` (stdio)")
    print(
        f"deploy with `{jetdbt} deploy PATH`, build with `{jetdbt} run PROJECT --watch`;"
        " Ctrl-C stops",
        flush=True,
    )


async def cmd_up(args, settings: Settings) -> int:
    stop = _stop_requested()
    return await _serve(Stack(settings), stop, _announce_up)


async def cmd_serve(args, settings: Settings) -> int:
    """One service per process, against configured servers (production)."""
    roles = {args.role} if args.role != "all" else set(ROLES)
    if not settings.nats_url or (roles & set(DATABASE_ROLES) and not settings.database_url):
        raise CliError(
            "`jetdbt serve` needs NATS_URL (and DATABASE_URL for projectors and the"
            " api; runners never touch Postgres); use `jetdbt up` locally"
        )
    stop = _stop_requested()
    return await _serve(Stack.serving(settings, roles), stop)


async def cmd_demo(args, settings: Settings) -> int:
    from jetdbt.services.cli.demo import demo

    return await demo(settings)

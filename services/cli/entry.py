"""`jetdbt`: parse the arguments, run the command, turn a known error into a message."""

from __future__ import annotations

import importlib
import os
import sys

from jetdbt.services.cli.parser import build_parser

__all__ = ["main"]

# Each command's module is imported when it runs: `jetdbt --help` imports nothing else, and
# `status` (read_commands) no event loop, NATS or aiohttp client.
COMMANDS = {
    "up": "stack_commands:cmd_up",
    "serve": "stack_commands:cmd_serve",
    "demo": "stack_commands:cmd_demo",
    "deploy": "run_commands:cmd_deploy",
    "promote": "run_commands:cmd_promote",
    "environments": "read_commands:cmd_environments",
    "run": "run_commands:cmd_run",
    "retry": "run_commands:cmd_retry",
    "parse": "run_commands:cmd_parse",
    "ci": "ci_commands:cmd_ci",
    "status": "read_commands:cmd_status",
    "projects": "read_commands:cmd_projects",
    "logs": "logs_command:cmd_logs",
    "cancel": "cancel_command:cmd_cancel",
    "replay": "ops_commands:cmd_replay",
    "audit": "ops_commands:cmd_audit",
    "dead-letters": "ops_commands:cmd_dead_letters",
    "token": "access_commands:cmd_token",
    "access": "access_commands:cmd_access",
    "contract": "access_commands:cmd_contract",
    "mcp": "mcp_command:cmd_mcp",
    "job": "job_commands:cmd_job",
    "schedule": "job_commands:cmd_schedule",
    "hook": "hook_commands:cmd_hook",
}

# Commands that serve the API, an aiohttp application. Every other command reaches NATS at
# nats:// only; nats-py imports aiohttp for websocket servers alone, a quarter of a second
# of such a command's start, so their modules import nats without it.
SERVING = frozenset({"up", "serve", "demo", "mcp"})
# Commands that start a stack themselves, in their own JETDBT_HOME: they look for no other.
STARTS_A_STACK = frozenset({"up", "serve", "demo"})

# Errors a user can act on, printed as one line: (module, class). An error whose module was
# never imported cannot have been raised, so they are looked up instead of imported.
USER_ERRORS = (
    ("jetdbt.services.cli.common", "CliError"),
    ("jetdbt.shared.bus.connection", "ServerRefused"),
    ("jetdbt.shared.bus.connection", "ConnectionLost"),
    ("jetdbt.shared.bus.contract", "IncompatibleContract"),
    ("jetdbt.shared.project.bundle", "BundleRefused"),
    ("jetdbt.services.cli.client", "CommandNotStored"),
    (
        "builtins",
        "ValueError",
    ),  # jetdbt.shared.bus.subjects.InvalidName and bad settings among them
)


def _command(name: str):
    module, function = COMMANDS[name].split(":")
    if name in SERVING or "aiohttp" in sys.modules:
        return getattr(importlib.import_module(f"jetdbt.services.cli.{module}"), function)
    sys.modules["aiohttp"] = None  # an import of it fails: nats goes without websockets
    try:
        return getattr(importlib.import_module(f"jetdbt.services.cli.{module}"), function)
    finally:
        del sys.modules["aiohttp"]


def _is_user_error(exc: BaseException) -> bool:
    for module, name in USER_ERRORS:
        found = getattr(sys.modules.get(module), name, None)
        if found is not None and isinstance(exc, found):
            return True
    return False


def _run(command, args, settings) -> int:
    """A command is a plain function (fast to start) or a coroutine function."""
    outcome = command(args, settings)
    if not hasattr(outcome, "__await__"):
        return outcome
    import asyncio

    return asyncio.run(outcome)


def _settings(args):
    """The environment's settings; a command that talks to a stack finds it from any folder
    (jetdbt.services.cli.common.located)."""
    from jetdbt.shared.process.config import load

    settings = load()
    if args.cmd in STARTS_A_STACK:
        return settings
    from jetdbt.services.cli.common import located

    return located(settings, home_given=bool(os.environ.get("JETDBT_HOME")))


def _reader_left() -> int:
    """`jetdbt logs RUN | head`: the reader closed the pipe. What is still buffered goes
    nowhere (Python would report the failed flush at exit), and the exit code is a shell's
    for a program SIGPIPE stopped, as `yes | head` gives."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return 128 + 13  # SIGPIPE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (see docs/guide.md)
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    command = _command(args.cmd)

    # Logs are configured when the command's modules log at all (they import structlog at
    # the top); `status` does not, and skips its import cost.
    if "jetdbt.shared.process.logging" in sys.modules:
        from jetdbt.shared.process import logging as jlog

        jlog.configure(args.log_level)
    try:
        code = _run(command, args, _settings(args))
        sys.stdout.flush()  # inside the try: a reader that left is seen here, not at exit
        return code
    except BrokenPipeError:
        return _reader_left()
    except KeyboardInterrupt:
        return 130  # a shell's code for a command Ctrl-C stopped
    except Exception as exc:
        if not _is_user_error(exc):
            raise
        print(f"jetdbt: {exc}", file=sys.stderr)
        return 2

"""`jetdbt`: parse the arguments, run the command, turn a known error into a message."""

from __future__ import annotations

import asyncio
import importlib
import sys

from services.cli.parser import build_parser

__all__ = ["main"]

# Each command's module is imported when it runs: `jetdbt --help` imports nothing else.
COMMANDS = {
    "up": "stack_commands:cmd_up",
    "serve": "stack_commands:cmd_serve",
    "demo": "stack_commands:cmd_demo",
    "deploy": "run_commands:cmd_deploy",
    "run": "run_commands:cmd_run",
    "retry": "run_commands:cmd_retry",
    "parse": "run_commands:cmd_parse",
    "status": "ops_commands:cmd_status",
    "replay": "ops_commands:cmd_replay",
    "audit": "ops_commands:cmd_audit",
    "dead-letters": "ops_commands:cmd_dead_letters",
}


def _command(name: str):
    module, function = COMMANDS[name].split(":")
    return getattr(importlib.import_module(f"services.cli.{module}"), function)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = _command(args.cmd)
    from services.cli.common import CliError
    from shared import logging as jlog
    from shared import subjects
    from shared.bundle import BundleRefused
    from shared.bus import ServerRefused
    from shared.config import load

    jlog.configure(args.log_level)
    try:
        return asyncio.run(command(args, load()))
    except (CliError, ServerRefused, BundleRefused, subjects.InvalidName, ValueError) as exc:
        print(f"jetdbt: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

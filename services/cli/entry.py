"""`jetdbt`: parse the arguments, run the command, turn a known error into a message."""

from __future__ import annotations

import asyncio
import sys

from services.cli.common import CliError
from services.cli.ops_commands import cmd_audit, cmd_dead_letters, cmd_replay, cmd_status
from services.cli.parser import build_parser
from services.cli.run_commands import cmd_deploy, cmd_parse, cmd_retry, cmd_run
from services.cli.stack_commands import cmd_demo, cmd_serve, cmd_up
from shared import logging as jlog
from shared import subjects
from shared.bundle import BundleRefused
from shared.bus import ServerRefused
from shared.config import load

__all__ = ["main"]

COMMANDS = {
    "up": cmd_up,
    "serve": cmd_serve,
    "deploy": cmd_deploy,
    "run": cmd_run,
    "retry": cmd_retry,
    "parse": cmd_parse,
    "status": cmd_status,
    "demo": cmd_demo,
    "replay": cmd_replay,
    "audit": cmd_audit,
    "dead-letters": cmd_dead_letters,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    jlog.configure(args.log_level)
    try:
        return asyncio.run(COMMANDS[args.cmd](args, load()))
    except (CliError, ServerRefused, BundleRefused, subjects.InvalidName, ValueError) as exc:
        print(f"jetdbt: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

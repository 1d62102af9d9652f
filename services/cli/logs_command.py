"""`jetdbt logs RUN_ID [--follow]`: a run's log lines, read from NATS as the API reads them.

Without --follow it prints the lines there are and exits 0. With --follow it prints
each line as the runner writes it and exits when the run ends: 0 when it passed,
EXIT_REFUSED when it was refused, EXIT_FAILED otherwise, as `jetdbt run` does. A line is
what dbt printed for a project, so a control character in it is printed as its code
(`printable`): an escape sequence never reaches the terminal.
"""

from __future__ import annotations

import sys

from jetdbt.services.cli.common import EXIT_FAILED, EXIT_REFUSED, CliError, open_bus
from jetdbt.services.cli.watch import printable
from jetdbt.shared.process.config import Settings
from jetdbt.shared.runs import run_logs, run_status

__all__ = ["cmd_logs"]


async def cmd_logs(args, settings: Settings) -> int:
    if args.after < 0:
        raise CliError(f"--after is a line number (0 or more), got {args.after}")
    bus = await open_bus(settings)
    try:
        found = await run_logs.find(bus, args.run_id)
        if found is None:
            raise CliError(f"run {args.run_id!r} not found: the event log has no event of it")
        try:
            if args.follow:
                async for line in found.follow(args.after):
                    if line is not None:
                        print(printable(line.text), flush=True)
            else:
                async for line in found.lines(args.after):
                    print(printable(line.text))
        except run_logs.LogGone as exc:
            raise CliError(str(exc)) from None
    finally:
        await bus.close()
    if not args.follow:
        return 0
    if found.status == run_status.PASSED:
        return 0
    print(f"run {found.run_id} {found.status}", file=sys.stderr)
    return EXIT_REFUSED if found.status == run_status.REFUSED else EXIT_FAILED

"""`jetdbt cancel RUN_ID`: publish a cancel of the run and wait for the run to end.

A queued run never starts; a running run's dbt is killed; either ends `cancelled`,
naming who cancelled it. Exits 0 once the run ended cancelled, EXIT_FAILED when it
ended otherwise first, and 2 (naming the run) when it was not found or had ended.
"""

from __future__ import annotations

import asyncio
import sys

from jetdbt.services.cli import client
from jetdbt.services.cli.common import EXIT_FAILED, CliError, open_bus
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.process.config import Settings
from jetdbt.shared.runs.run_status import CANCELLED, ended_as

__all__ = ["cmd_cancel"]


async def cmd_cancel(args, settings: Settings) -> int:
    subjects.check_run_id(args.run_id)
    bus = await open_bus(settings)
    try:
        return await _cancel(bus, args.run_id, args.timeout)
    finally:
        await bus.close()


async def _cancel(bus, run_id: str, timeout: float) -> int:
    asked = await bus.last_event(subjects.run_event_of_any_project(run_id, "requested"))
    if asked is None:
        raise CliError(f"run {run_id!r} not found: the event log has no request for it")
    project = asked.project
    ended: asyncio.Queue = asyncio.Queue()

    async def collect(msg) -> None:
        event = ev.decode(msg.data)
        if isinstance(event, ev.RUN_ENDS):
            ended.put_nowait(event)

    # Subscribed before the check: a run ending in between is seen either way.
    sub = await bus.follow(subjects.run_pattern(project, run_id), collect)
    try:
        if (end := await bus.run_end(project, run_id)) is not None:
            raise CliError(f"run {run_id!r} has ended ({ended_as(end)}): nothing to cancel")
        by = client.principal()
        cmd = commands.CancelCommand(run_id=run_id, requested_by=by)
        await bus.publish_command("cancel", project, cmd, run_id, principal=by)
        try:
            final = await asyncio.wait_for(ended.get(), timeout)
        except TimeoutError:
            raise CliError(
                f"cancel of run {run_id!r} published; it had not ended after {timeout:.0f}s"
            ) from None
    finally:
        await sub.unsubscribe()
    if ended_as(final) == CANCELLED:
        print(f"run {run_id} cancelled by {final.result.cancelled_by or 'unknown'}")
        return 0
    print(f"run {run_id} ended {ended_as(final)} before the cancel reached it", file=sys.stderr)
    return EXIT_FAILED

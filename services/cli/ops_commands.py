"""Commands that read and repair what the log built: replay, audit, dead letters."""

from __future__ import annotations

from pathlib import Path

import msgspec
from jetdbt.projections import dead_letters, replay
from jetdbt.projections.migrate import connect_pool
from jetdbt.projections.replay_report import render as render_replay
from jetdbt.services.audit import export
from jetdbt.services.audit import run_history as audit
from jetdbt.services.cli.common import EXIT_FAILED, database_url, open_bus
from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.read_commands import show
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_replay", "cmd_audit", "cmd_dead_letters"]


async def cmd_replay(args, settings: Settings) -> int:
    bus = await open_bus(settings)
    try:
        report = await replay.replay(
            bus,
            database_url(settings),
            settings.schema,
            None if args.all else args.projection,
            swap=args.swap,
            keep=args.keep,
            show=args.show,
        )
    finally:
        await bus.close()
    print(render_replay(report))
    return 0 if report.swapped or not report.differences else EXIT_FAILED


async def cmd_audit(args, settings: Settings) -> int:
    bus = await open_bus(settings)
    try:
        if args.audit_cmd == "run":
            history = await audit.run_history(bus, args.run_id, args.project)
            print(msgspec.json.encode(history).decode() if args.json else audit.render(history))
            return 0
        done = await export.export(
            bus,
            Path(args.out),
            since=export.parse_time(args.since) if args.since else None,
            until=export.parse_time(args.until) if args.until else None,
            project=args.project,
        )
    finally:
        await bus.close()
    sequences = f"{done.first_seq}..{done.last_seq}"
    print(f"wrote {counted(done.rows, 'event')} (sequences {sequences}) to {done.path}")
    return 0


async def cmd_dead_letters(args, settings: Settings) -> int:
    if args.dead_cmd == "list":
        return show(settings, "/v1/dead-letters")
    bus = await open_bus(settings)
    pool = await connect_pool(database_url(settings), settings.schema, min_size=1, max_size=2)
    try:
        outcomes = await dead_letters.retry(pool, bus, args.projection)
    finally:
        await pool.close()
        await bus.close()
    for o in outcomes:
        print(
            f"{o.projector} #{o.stream_seq}: " + ("applied" if o.applied else f"failed: {o.error}")
        )
    failing = sum(not o.applied for o in outcomes)
    print(f"{len(outcomes) - failing} applied, {failing} still failing")
    return EXIT_FAILED if failing else 0

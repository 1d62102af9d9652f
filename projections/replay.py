"""Rebuild projections from stream sequence 1 into a shadow schema, compare, swap.

The shadow is built with the same folds and the same batch loop as the live
projectors, up to each live checkpoint, reading the log once for all of them.
The comparison then runs in one repeatable-read transaction: it reads the live
checkpoints, brings the shadow to exactly those positions inside the same
transaction, and joins every table with its live twin on the primary key, every
column compared. Live projectors keep running throughout.

The swap locks the live checkpoints table (every projector transaction starts by
reading it, so in-flight batches finish first and new ones wait), brings the
shadow to the live positions, and in that one transaction renames live to an
old name, the shadow to the live name, and drops the old schema. The waiting
projectors then resolve their tables by name into the new schema and go on
from the checkpoints the shadow carries.
"""

from __future__ import annotations

import contextlib
import time
import uuid

from jetdbt.projections.catch_up import catch_up
from jetdbt.projections.migrate import connect_pool, quote_ident
from jetdbt.projections.registry import FOLDS, TABLES
from jetdbt.projections.replay_report import ProjectionReplay, ReplayReport
from jetdbt.projections.shadow_diff import table_diff
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process import logging as jlog

__all__ = ["replay", "BOOKKEEPING"]

# Tables of the loop itself, not of any fold: positions and failures, never compared.
BOOKKEEPING = ("schema_migrations", "checkpoints", "dead_letters")
LOCK_TIMEOUT = "30s"


class _Joined:
    """A pool of one connection, so a catch-up runs inside its caller's transaction."""

    def __init__(self, conn):
        self._conn = conn

    def acquire(self):
        return contextlib.nullcontext(self._conn)


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for name, n in more.items():
        total[name] += n


def _shadow_name(live: str) -> str:
    return f"{live[:40]}__replay_{uuid.uuid4().hex[:8]}"


async def _live_marks(conn, live: str) -> dict[str, int]:
    rows = await conn.fetch(f"SELECT projector, last_seq FROM {quote_ident(live)}.checkpoints")
    return {r["projector"]: r["last_seq"] for r in rows}


async def _tables(conn, schema: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        schema,
    )
    return [r["relname"] for r in rows if r["relname"] not in BOOKKEEPING]


async def _compare(conn, bus, live, shadow, names, subjects, tables, show, read):
    """Shadow and live at the same positions, in one snapshot: the live positions and the
    differences of each table."""
    async with conn.transaction(isolation="repeatable_read"):
        marks = await _live_marks(conn, live)  # the snapshot starts here
        _add(read, await catch_up(bus, _Joined(conn), names, subjects, marks))
        diffs = [await table_diff(conn, live, shadow, t, show) for t in tables]
    return marks, diffs


async def _swap(conn, bus, live, shadow, names, subjects, read) -> None:
    old = f"{live[:40]}__old_{uuid.uuid4().hex[:8]}"
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        await conn.execute(f"LOCK TABLE {quote_ident(live)}.checkpoints IN ACCESS EXCLUSIVE MODE")
        marks = await _live_marks(conn, live)
        _add(read, await catch_up(bus, _Joined(conn), names, subjects, marks))
        await conn.execute(f"ALTER SCHEMA {quote_ident(live)} RENAME TO {quote_ident(old)}")
        await conn.execute(f"ALTER SCHEMA {quote_ident(shadow)} RENAME TO {quote_ident(live)}")
        await conn.execute(f"DROP SCHEMA {quote_ident(old)} CASCADE")


def _check(names: list[str] | None, swap: bool, subjects: dict) -> list[str]:
    chosen = list(FOLDS) if names is None else list(dict.fromkeys(names))
    for name in chosen:
        if name not in FOLDS or name not in subjects:
            raise ValueError(f"no projection named {name!r}; known: {', '.join(FOLDS)}")
        if names is not None and name not in TABLES:
            raise ValueError(
                f"projection {name!r} declares no tables in jetdbt.projections.registry"
            )
    if swap and set(chosen) != set(FOLDS):
        raise ValueError("--swap replaces the whole live schema, so it replays every projection")
    return chosen


async def replay(
    bus: Bus,
    dsn: str,
    live: str,
    names: list[str] | None = None,
    *,
    swap: bool = False,
    keep: bool = False,
    show: int = 20,
) -> ReplayReport:
    """Replay `names` (every projection when None) into a shadow of `live` and compare;
    with `swap`, the shadow then becomes the live schema."""
    log = jlog.get("replay", schema=live)
    subjects = contract.load().projections
    chosen = _check(names, swap, subjects)
    shadow = _shadow_name(live)
    # The shadow pool's connections see the shadow first and speak JSON like the live ones,
    # so the catch-ups inside the compare and swap transactions fold as the projectors do.
    pool = await connect_pool(dsn, shadow, min_size=1, max_size=len(chosen) + 1)
    done = False
    try:
        async with pool.acquire() as conn:
            if not await conn.fetchval("SELECT to_regnamespace($1) IS NOT NULL", live):
                raise ValueError(f"schema {live!r} does not exist (JETDBT_SCHEMA names it)")
            marks = await _live_marks(conn, live)
        log.info("replay_started", shadow=shadow, projections=chosen, positions=marks)
        started = time.perf_counter()
        read = await catch_up(bus, pool, chosen, subjects, marks)
        build_seconds = time.perf_counter() - started
        built = sum(read.values())
        async with pool.acquire() as conn:
            tables = (
                await _tables(conn, shadow)
                if names is None
                else [t for n in chosen for t in TABLES[n]]
            )
            marks, diffs = await _compare(
                conn, bus, live, shadow, chosen, subjects, tables, show, read
            )
            positions = await _live_marks(conn, shadow)
            if swap:
                await _swap(conn, bus, live, shadow, chosen, subjects, read)
        done = True
    finally:
        if not (done and (swap or keep)):
            async with pool.acquire() as conn:
                await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(shadow)} CASCADE")
        await pool.close()
    report = ReplayReport(
        live_schema=live,
        shadow_schema=shadow,
        projections=[
            ProjectionReplay(
                projection=n,
                events=read[n],
                checkpoint=positions.get(n, 0),
                live_checkpoint=marks.get(n, 0),
            )
            for n in chosen
        ],
        tables=diffs,
        events=sum(read.values()),
        build_seconds=build_seconds,
        events_per_second=built / build_seconds if build_seconds else 0.0,
        swapped=swap,
        kept=keep and not swap,
    )
    log.info("replay_finished", shadow=shadow, events=report.events, differences=report.differences)
    return report

"""Rebuild projections from stream sequence 1 into a shadow schema, compare, swap.

The shadow is built with the same folds and the same loop as the live
projectors, up to each live checkpoint. The comparison then runs in one
repeatable-read transaction: it reads the live checkpoints, brings the shadow
to exactly those positions inside the same transaction, and joins every table
with its live twin on the primary key, every column compared. Live projectors
keep running throughout.

The swap locks the live checkpoints table (every projector transaction starts by
reading it, so in-flight batches finish first and new ones wait), brings the
shadow to the live positions, and in that one transaction renames live to an
old name, the shadow to the live name, and drops the old schema. The waiting
projectors then resolve their tables by name into the new schema and go on
from the checkpoints the shadow carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import msgspec

from projections.loop import Projector, checkpoint
from projections.migrate import connect_pool, quote_ident
from projections.registry import FOLDS, TABLES
from shared import contract
from shared import logging as jlog
from shared.bus import EVENTS, Bus
from shared.reader import Slice

__all__ = [
    "Difference",
    "TableDiff",
    "ProjectionReplay",
    "ReplayReport",
    "replay",
    "render",
    "BOOKKEEPING",
]

# Tables of the loop itself, not of any fold: positions and failures, never compared.
BOOKKEEPING = ("schema_migrations", "checkpoints", "dead_letters")
BATCH = 1000
LOCK_TIMEOUT = "30s"


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    table: str
    key: dict[str, Any]
    columns: list[str]  # the columns that differ; every column when a side has no row
    live: dict[str, Any] | None
    shadow: dict[str, Any] | None


class TableDiff(msgspec.Struct, frozen=True, kw_only=True):
    table: str
    live_rows: int
    shadow_rows: int
    differences: int
    shown: list[Difference]


class ProjectionReplay(msgspec.Struct, frozen=True, kw_only=True):
    projection: str
    events: int
    checkpoint: int
    live_checkpoint: int


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    live_schema: str
    shadow_schema: str
    projections: list[ProjectionReplay]
    tables: list[TableDiff]
    events: int
    build_seconds: float
    events_per_second: float
    swapped: bool
    kept: bool

    @property
    def differences(self) -> int:
        return sum(t.differences for t in self.tables)


class _Joined:
    """A pool of one connection, so a catch-up runs inside its caller's transaction."""

    def __init__(self, conn):
        self._conn = conn

    def acquire(self):
        return contextlib.nullcontext(self._conn)


def _shadow_name(live: str) -> str:
    return f"{live[:40]}__replay_{uuid.uuid4().hex[:8]}"


async def catch_up(bus: Bus, pool, name: str, subjects: list[str], until: int) -> int:
    """Apply what the shadow lacks up to sequence `until`; returns the events read."""
    projector = Projector(bus, pool, FOLDS[name](bus), subjects, batch=BATCH)
    async with pool.acquire() as conn:
        after = await checkpoint(conn, name)
    read = 0
    async with Slice(bus.js, EVENTS, subjects, after=after, until=until, batch=BATCH) as batches:
        async for msgs in batches:
            await projector.apply_batch(msgs)
            read += len(msgs)
    return read


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


async def _table_diff(conn, live: str, shadow: str, table: str, show: int) -> TableDiff:
    rel = f"{quote_ident(shadow)}.{quote_ident(table)}"
    columns = await conn.fetch(
        "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
        " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        rel,
    )
    key = [
        r["attname"]
        for r in await conn.fetch(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
            " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = $1::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey::int2[], a.attnum)",
            rel,
        )
    ]
    if not key:
        raise ValueError(f"table {table} has no primary key; replay compares rows by it")

    def col(side: str, name: str, kind: str) -> str:
        # json has no equality operator; its text is what the fold wrote.
        ref = f"{side}.{quote_ident(name)}"
        return f"{ref}::text" if kind == "json" else ref

    live_rel = f"{quote_ident(live)}.{quote_ident(table)}"
    join = " AND ".join(f"l.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)
    first = quote_ident(key[0])
    differ = " OR ".join(
        f"{col('l', c['attname'], c['type'])} IS DISTINCT FROM {col('s', c['attname'], c['type'])}"
        for c in columns
    )
    order = ", ".join(f"coalesce(l.{quote_ident(k)}, s.{quote_ident(k)})" for k in key)
    rows = await conn.fetch(
        f"SELECT count(*) OVER () AS n,"
        f" CASE WHEN l.{first} IS NULL THEN NULL ELSE to_jsonb(l)::text END AS live,"
        f" CASE WHEN s.{first} IS NULL THEN NULL ELSE to_jsonb(s)::text END AS shadow"
        f" FROM {live_rel} l FULL JOIN {rel} s ON {join}"
        f" WHERE l.{first} IS NULL OR s.{first} IS NULL OR {differ}"
        f" ORDER BY {order} LIMIT $1",
        max(show, 1),
    )
    shown = []
    for r in rows[:show]:
        a = msgspec.json.decode(r["live"]) if r["live"] else None
        b = msgspec.json.decode(r["shadow"]) if r["shadow"] else None
        names = [c["attname"] for c in columns]
        changed = names if a is None or b is None else [n for n in names if a[n] != b[n]]
        either = a or b
        shown.append(
            Difference(
                table=table, key={k: either[k] for k in key}, columns=changed, live=a, shadow=b
            )
        )
    return TableDiff(
        table=table,
        live_rows=await conn.fetchval(f"SELECT count(*) FROM {live_rel}"),
        shadow_rows=await conn.fetchval(f"SELECT count(*) FROM {rel}"),
        differences=rows[0]["n"] if rows else 0,
        shown=shown,
    )


async def _compare(conn, bus, live, shadow, names, subjects, tables, show, read):
    """Shadow and live at the same positions, in one snapshot: the live positions and the
    differences of each table."""
    async with conn.transaction(isolation="repeatable_read"):
        marks = await _live_marks(conn, live)  # the snapshot starts here
        for name in names:
            read[name] += await catch_up(
                bus, _Joined(conn), name, subjects[name], marks.get(name, 0)
            )
        diffs = [await _table_diff(conn, live, shadow, t, show) for t in tables]
    return marks, diffs


async def _swap(conn, bus, live, shadow, names, subjects, read) -> None:
    old = f"{live[:40]}__old_{uuid.uuid4().hex[:8]}"
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        await conn.execute(f"LOCK TABLE {quote_ident(live)}.checkpoints IN ACCESS EXCLUSIVE MODE")
        marks = await _live_marks(conn, live)
        for name in names:
            read[name] += await catch_up(
                bus, _Joined(conn), name, subjects[name], marks.get(name, 0)
            )
        await conn.execute(f"ALTER SCHEMA {quote_ident(live)} RENAME TO {quote_ident(old)}")
        await conn.execute(f"ALTER SCHEMA {quote_ident(shadow)} RENAME TO {quote_ident(live)}")
        await conn.execute(f"DROP SCHEMA {quote_ident(old)} CASCADE")


def _check(names: list[str] | None, swap: bool, subjects: dict) -> list[str]:
    chosen = list(FOLDS) if names is None else list(dict.fromkeys(names))
    for name in chosen:
        if name not in FOLDS or name not in subjects:
            raise ValueError(f"no projection named {name!r}; known: {', '.join(FOLDS)}")
        if names is not None and name not in TABLES:
            raise ValueError(f"projection {name!r} declares no tables in projections.registry")
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
        built = await asyncio.gather(
            *(catch_up(bus, pool, n, subjects[n], marks.get(n, 0)) for n in chosen)
        )
        build_seconds = time.perf_counter() - started
        read = dict(zip(chosen, built, strict=True))
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
        events_per_second=sum(built) / build_seconds if build_seconds else 0.0,
        swapped=swap,
        kept=keep and not swap,
    )
    log.info("replay_finished", shadow=shadow, events=report.events, differences=report.differences)
    return report


def _value(row: dict, column: str) -> str:
    return msgspec.json.encode(row[column]).decode()


def render(r: ReplayReport) -> str:
    """The report for a person: positions, row counts, then each difference shown."""
    lines = [
        f"replayed {r.events} events into {r.shadow_schema} ({r.events_per_second:.0f} events/s"
        f" while rebuilding)",
        f"{'projection':<16}{'events':>10}{'checkpoint':>12}{'live':>12}",
    ]
    lines += [
        f"{p.projection:<16}{p.events:>10}{p.checkpoint:>12}{p.live_checkpoint:>12}"
        for p in r.projections
    ]
    lines.append(f"{'table':<24}{'live rows':>12}{'shadow rows':>12}{'differences':>12}")
    lines += [
        f"{t.table:<24}{t.live_rows:>12}{t.shadow_rows:>12}{t.differences:>12}" for t in r.tables
    ]
    for t in r.tables:
        for d in t.shown:
            key = ", ".join(f"{k}={v}" for k, v in d.key.items())
            if d.live is None:
                what = "missing in live"
            elif d.shadow is None:
                what = "missing in the replay"
            else:
                what = "; ".join(
                    f"{c}: live {_value(d.live, c)}, replay {_value(d.shadow, c)}"
                    for c in d.columns
                )
            lines.append(f"  {t.table} {key}: {what}")
        if t.differences > len(t.shown):
            lines.append(f"  {t.table}: {t.differences - len(t.shown)} more not shown")
    lines.append(f"{r.differences} differences")
    if r.swapped:
        lines.append(f"swapped: {r.live_schema} now holds the replayed projections")
    elif r.kept:
        lines.append(f"kept the shadow schema {r.shadow_schema}")
    return "\n".join(lines)

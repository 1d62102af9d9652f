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
import gc
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
from shared.subjects import covering

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
BATCH = 5000
GC_THRESHOLD = 50_000
ROUTES = 100_000  # subjects whose folds are remembered while reading
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


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for name, n in more.items():
        total[name] += n


def _shadow_name(live: str) -> str:
    return f"{live[:40]}__replay_{uuid.uuid4().hex[:8]}"


class _OnePass:
    """One ordered read of the log feeding several folds, each between its own checkpoint
    and target: a message goes to the folds whose subjects it is on, and a fold that
    gets nothing from a batch only has its position moved, once, at the end."""

    def __init__(self, projectors: dict[str, Projector], after: dict, until: dict):
        self.projectors = projectors
        self.after = after
        self.until = until
        self.applied = dict.fromkeys(projectors, 0)
        self.owed = dict.fromkeys(projectors, 0)
        self.routes: dict[str, tuple[str, ...]] = {}  # subject -> the folds that read it

    def _takers(self, subject: str) -> tuple[str, ...]:
        takers = self.routes.get(subject)
        if takers is None:
            if len(self.routes) >= ROUTES:
                self.routes.clear()
            takers = tuple(n for n, p in self.projectors.items() if p.wants(subject))
            self.routes[subject] = takers
        return takers

    async def feed(self, pairs) -> None:
        parts: dict[str, list] = {n: [] for n in self.projectors}
        for seq, msg in pairs:
            for n in self._takers(msg.subject):
                if self.after[n] < seq <= self.until[n]:
                    parts[n].append((seq, msg))
        last = pairs[-1][0]
        for n, projector in self.projectors.items():
            self.owed[n] = max(self.owed[n], min(last, self.until[n]))
            if parts[n]:
                await projector.apply_batch(parts[n], upto=self.owed[n])
                self.applied[n] += len(parts[n])

    async def finish(self) -> None:
        for n, projector in self.projectors.items():
            if self.owed[n] > self.after[n]:
                await projector.apply_batch([], upto=self.owed[n])


@contextlib.contextmanager
def _rare_collections():
    """A replay allocates millions of short-lived objects while tens of thousands are in
    flight; at the default threshold the cycle collector runs every 700 allocations and
    takes ~15% of a replay (bench/bench_replay.py)."""
    before = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


async def catch_up(
    bus: Bus, pool, names: list[str], subjects: dict[str, list[str]], until: dict[str, int]
) -> dict[str, int]:
    """Bring each projection in `names` from its checkpoint to `until[name]`, reading the log
    once, on the one subject that covers them all. Returns the events each one applied."""
    async with pool.acquire() as conn:
        after = {n: await checkpoint(conn, n) for n in names}
    behind = [n for n in names if until.get(n, 0) > after[n]]
    applied = dict.fromkeys(names, 0)
    if not behind:
        return applied
    projectors = {n: Projector(bus, pool, FOLDS[n](bus), subjects[n], batch=BATCH) for n in behind}
    reading = _OnePass(projectors, after, until)
    pattern = covering([s for n in behind for s in subjects[n]])
    first, last = min(after[n] for n in behind), max(until[n] for n in behind)
    with _rare_collections():
        async with Slice(bus.js, EVENTS, pattern, after=first, until=last, batch=BATCH) as it:
            async for pairs in it:
                await reading.feed(pairs)
    await reading.finish()
    return applied | reading.applied


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
        _add(read, await catch_up(bus, _Joined(conn), names, subjects, marks))
        diffs = [await _table_diff(conn, live, shadow, t, show) for t in tables]
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

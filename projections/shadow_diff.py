"""One table of a shadow schema compared with its live twin, row by row on the primary key."""

from __future__ import annotations

from typing import Any

import msgspec
from jetdbt.projections.migrate import quote_ident

__all__ = ["Difference", "TableDiff", "table_diff"]


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


async def table_diff(conn, live: str, shadow: str, table: str, show: int) -> TableDiff:
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

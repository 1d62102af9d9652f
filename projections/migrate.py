"""Apply the SQL migrations, in order, into one schema (the live one or a replay shadow)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import msgspec

__all__ = ["migrate", "quote_ident", "connect_pool"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def migrate(conn: asyncpg.Connection, schema: str) -> list[str]:
    """Create `schema` and apply what it lacks; returns the names applied. Serialised by a lock."""
    applied = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"jetdbt-migrate:{schema}")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        await conn.execute(f"SET LOCAL search_path TO {quote_ident(schema)}")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")}
        for path in sorted(MIGRATIONS.glob("*.sql")):
            if path.name in done:
                continue
            await conn.execute(path.read_text())
            await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", path.name)
            applied.append(path.name)
    return applied


async def _init(conn: asyncpg.Connection) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(
            kind, encoder=_json_encode, decoder=_json_decode, schema="pg_catalog"
        )


def _json_encode(value) -> str:
    return msgspec.json.encode(value).decode()


def _json_decode(text: str):
    return msgspec.json.decode(text)


async def connect_pool(dsn: str, schema: str, **kw) -> asyncpg.Pool:
    """A pool whose connections see `schema` first and speak JSON natively.

    Commits do not wait for the WAL flush: every projection commits its checkpoint with
    its rows, so a commit lost to a crash is folded again from the log, and a replay
    or a busy projector is not held to one disk flush per batch.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, schema)
    finally:
        await conn.close()
    settings = {"search_path": schema, "synchronous_commit": "off"}
    return await asyncpg.create_pool(dsn, server_settings=settings, init=_init, **kw)

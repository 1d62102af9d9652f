"""Small helpers shared by tests: polling the API and reading the warehouse."""

from __future__ import annotations

import asyncio

import aiohttp
import duckdb


async def get_json(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.json()


async def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1):
    """Poll an async predicate until it returns something truthy."""
    async with asyncio.timeout(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await asyncio.sleep(interval)


def duckdb_tables(path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name FROM information_schema.tables"
        ).fetchall()
    finally:
        con.close()
    return {r[0] for r in rows}

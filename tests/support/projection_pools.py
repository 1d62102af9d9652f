"""A Postgres pool on a scratch schema of its own, and a projector running over it: for fold
tests that need no stack."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from jetdbt.projections.migrate import connect_pool, quote_ident


@contextlib.asynccontextmanager
async def scratch_pool(pg_url):
    """A pool on a schema of its own, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    p = await connect_pool(pg_url, schema)
    try:
        yield p
    finally:
        async with p.acquire() as conn:
            await conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
        await p.close()


@contextlib.asynccontextmanager
async def running(projector):
    """Run a projector as a task; stop it cleanly (as a service shutdown does) on exit."""
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)

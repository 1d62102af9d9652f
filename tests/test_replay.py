"""Replay against real NATS, Postgres and dbt: a shadow rebuilt from the log equals the live
tables, a difference is found and shown, and a swap replaces the live schema under load."""

from __future__ import annotations

import asyncio
import uuid

from projections.dead_letters import retry
from projections.migrate import connect_pool, quote_ident
from projections.registry import FOLDS, TABLES
from projections.replay import BOOKKEEPING, replay
from services import client
from shared import events as ev
from shared.commands import BuildCommand, RunCommand
from tests import synthetic
from tests.conftest import EXAMPLE
from tests.helpers import get_json
from tests.recorded_log import settled


async def test_every_projection_table_has_one_owner(pg_url):
    """`--projection NAME` compares TABLES[NAME]; a table nobody owns would go unchecked."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    pool = await connect_pool(pg_url, schema)
    try:
        async with pool.acquire() as conn:
            rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
            await conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
    finally:
        await pool.close()
    owned = [t for tables in TABLES.values() for t in tables]
    assert len(owned) == len(set(owned)), "a table is claimed by two projections"
    assert set(TABLES) == set(FOLDS)
    assert {r["tablename"] for r in rows} - set(BOOKKEEPING) == set(owned)


async def test_replay_of_real_runs_finds_no_differences(stack):
    _, deployed = await client.deploy(stack.bus, EXAMPLE, "jaffle_shop")
    assert isinstance(deployed, ev.Deployed), deployed
    passed = await client.run(stack.bus, "jaffle_shop", RunCommand(command=BuildCommand()))
    assert passed.result.status == "passed", passed.result.error
    failing = RunCommand(command=BuildCommand(vars={"fail_error_test": True}))
    failed = await client.run(stack.bus, "jaffle_shop", failing)
    assert failed.result.status == "failed"
    refused = await client.run(stack.bus, "never_deployed", RunCommand(command=BuildCommand()))
    assert isinstance(refused, ev.RunRefused)
    await settled(stack)

    report = await replay(stack.bus, stack.database_url, stack.settings.schema, show=100)

    rows = {t.table: t.live_rows for t in report.tables}
    assert rows["runs"] == 3 and rows["run_nodes"] == 2 * 23 and rows["deploys"] == 1
    assert {t.table for t in report.tables} == {t for ts in TABLES.values() for t in ts}
    by_name = {p.projection: p for p in report.projections}
    assert by_name["progress"].events >= 2 * (2 * 23 + 3) + 2 and by_name["deploys"].events >= 2
    assert all(p.checkpoint == p.live_checkpoint for p in report.projections)
    async with stack.pool.acquire() as conn:
        shadows = await conn.fetchval(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1",
            f"{stack.settings.schema}__%",
        )
    assert shadows == 0, "the shadow schema is dropped after a compare"
    shown = [d for t in report.tables for d in t.shown]
    assert len(shown) == report.differences
    assert [(d.table, d.key, d.columns) for d in shown] == []
    assert report.differences == 0


async def test_a_dead_letter_shows_as_a_difference_until_retried(stack):
    """Postgres refuses one event live (a constraint stands in for a fold bug); the replay
    shows the missing row, the API lists the dead letter, and a retry after the fix heals it."""
    schema = quote_ident(stack.settings.schema)
    async with stack.pool.acquire() as conn:
        await conn.execute(
            f"ALTER TABLE {schema}.runs ADD CONSTRAINT not_blocked CHECK (project <> 'blocked')"
        )
    await synthetic.publish(stack.bus, synthetic.log(3))
    blocked = ev.RunRequested(project="blocked", run_id="b1", command={"label": "build"})
    await stack.bus.publish(blocked)
    await settled(stack)

    status, body = await get_json(f"{stack.api_url}/v1/dead-letters")
    assert status == 200
    [dead] = body["dead_letters"]
    assert dead["projector"] == "progress" and dead["subject"] == blocked.subject()
    assert "CheckViolationError" in dead["error"] and '"run_id":"b1"' in dead["data"]
    status, body = await get_json(f"{stack.api_url}/v1/projections")
    progress = next(p for p in body["projections"] if p["projection"] == "progress")
    assert progress["dead_letters"] == 1 and progress["lag"] == 0

    report = await replay(stack.bus, stack.database_url, stack.settings.schema, ["progress"])
    assert report.differences == 1
    [runs] = [t for t in report.tables if t.differences]
    [diff] = runs.shown
    assert runs.table == "runs" and diff.key == {"run_id": "b1"}
    assert diff.live is None and diff.shadow["project"] == "blocked"

    async with stack.pool.acquire() as conn:
        await conn.execute(f"ALTER TABLE {schema}.runs DROP CONSTRAINT not_blocked")
    [outcome] = await retry(stack.pool, stack.bus)
    assert outcome.applied and outcome.stream_seq == dead["stream_seq"]
    report = await replay(stack.bus, stack.database_url, stack.settings.schema, ["progress"])
    assert report.differences == 0
    status, body = await get_json(f"{stack.api_url}/v1/dead-letters")
    assert body["dead_letters"] == []


async def publish_until(bus, stop: asyncio.Event, start: int) -> int:
    """Publish synthetic runs, a steady trickle, until `stop`; returns the next run number."""
    k = start
    while not stop.is_set():
        await synthetic.publish(bus, synthetic.log(1, start=k), 8)
        await asyncio.sleep(0.02)
        k += 1
    return k


async def test_swap_replaces_the_live_schema_while_projection_goes_on(stack):
    schema = stack.settings.schema
    await synthetic.publish(stack.bus, synthetic.log(20))
    await settled(stack)
    async with stack.pool.acquire() as conn:
        await conn.execute("UPDATE runs SET status = 'tampered' WHERE run_id = 'r3'")
        live_oid = await conn.fetchval("SELECT $1::regnamespace::oid", schema)

    stop = asyncio.Event()
    flowing = asyncio.create_task(publish_until(stack.bus, stop, 20))
    await asyncio.sleep(0.3)
    report = await replay(stack.bus, stack.database_url, schema, swap=True)
    assert not flowing.done()
    await asyncio.sleep(0.3)
    stop.set()
    runs = await flowing
    assert runs > 25
    assert report.swapped and report.differences == 1  # the tampered row, shown before the swap
    [diff] = [d for t in report.tables for d in t.shown]
    assert diff.key == {"run_id": "r3"} and diff.columns == ["status"]

    await settled(stack)  # the live projectors went on, now in the new schema
    async with stack.pool.acquire() as conn:
        assert await conn.fetchval("SELECT $1::regnamespace::oid", schema) != live_oid
        assert await conn.fetchval("SELECT status FROM runs WHERE run_id = 'r3'") == "passed"
        assert await conn.fetchval("SELECT count(*) FROM runs") == runs
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
        left = await conn.fetchval(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", f"{schema}__%"
        )
    assert left == 0
    again = await replay(stack.bus, stack.database_url, schema)
    assert again.differences == 0

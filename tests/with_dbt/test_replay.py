"""Replay against real NATS and Postgres: a shadow rebuilt from the log equals the live
tables, a difference is found and shown, and a swap replaces the live schema under load.

The logs are recorded real runs (tests/support/recorded_log.py) and synthetic ones; one test runs
dbt itself, and audits its run too, so a real run's log is proven to replay today."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from jetdbt.projections.dead_letters import retry
from jetdbt.projections.migrate import connect_pool, quote_ident
from jetdbt.projections.registry import FOLDS, TABLES
from jetdbt.projections.replay import BOOKKEEPING, replay
from jetdbt.services.cli import client
from jetdbt.shared.bus import contract
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support import recorded_log, synthetic
from tests.support.helpers import deploy_and_wait, get_json, jetdbt
from tests.support.paths import EXAMPLE
from tests.support.recorded_log import recording, settled

recorded_stack = recorded_log.recorded_stack  # a fixture
SUBJECTS = contract.load().projections


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


async def test_replay_of_recorded_real_runs_finds_no_differences(recorded_stack):
    """The recorded log: a deploy, a passing and a failing build, a retry of the failing
    one, a refused and a malformed run, two declared writes (one refused), a freshness
    check of one source and a catalog of nine nodes."""
    stack, log = recorded_stack, recording()
    report = await replay(stack.bus, stack.database_url, stack.settings.schema, show=100)

    rows = {t.table: t.live_rows for t in report.tables}
    # Two builds of 23 nodes; the retry reran the failed test and the 4 nodes it skipped; the
    # freshness check's one source, and docs generate's 23 compiled nodes.
    assert rows["runs"] == len(log.runs) == 7 and rows["run_nodes"] == 2 * 23 + 5 + 1 + 23
    assert rows["source_freshness"] == 1 and rows["node_catalog"] == 9
    assert rows["deploys"] == 1 and rows["retry_state"] == rows["environments"] == 1
    assert rows["relation_writes"] == 2
    assert {t.table for t in report.tables} == {t for ts in TABLES.values() for t in ts}
    by_name = {p.projection: p for p in report.projections}
    assert all(p.events == len(log.on(SUBJECTS[n])) for n, p in by_name.items())
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


@pytest.mark.dbt
async def test_a_real_run_replays_without_differences_and_audits_from_its_log(stack):
    """The one test of replay and audit that runs dbt: elsewhere the recorded log stands in
    for it, and this proves that what a real run publishes today replays and audits too."""
    deployed = await deploy_and_wait(stack.bus, EXAMPLE, "jaffle_shop")
    failing = RunCommand(command=BuildCommand(vars={"fail_error_test": True}), requested_by="ann")
    failed = await client.run(stack.bus, "jaffle_shop", failing)
    assert failed.result.status == "failed"
    await settled(stack)

    report = await replay(stack.bus, stack.database_url, stack.settings.schema)
    rows = {t.table: t.live_rows for t in report.tables}
    assert rows["runs"] == 1 and rows["run_nodes"] == 23 and rows["deploys"] == 1
    assert rows["graph_nodes"] > 0 and rows["retry_state"] == 1
    assert report.differences == 0, [d for t in report.tables for d in t.shown]

    done = await jetdbt(stack, "audit", "run", failed.run_id, "--json")
    assert done.returncode == 0, done.stderr
    h = json.loads(done.stdout)
    assert (h["project"], h["status"], h["requested_by"]) == ("jaffle_shop", "failed", "ann")
    assert h["arguments"]["vars"] == {"fail_error_test": True}
    [attempt] = h["attempts"]
    assert (attempt["version"], attempt["exit_code"]) == (deployed.version, 1)
    outcomes = {n["unique_id"]: n["outcome"] for n in h["nodes"]}
    assert len(outcomes) == 23
    assert outcomes["test.jaffle_shop.assert_positive_order_total"] == "failed"


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

"""One behaviour suite, written once and run over every fold in jetdbt.projections.registry.FOLDS.

Each fold is given the events of the recorded real log (tests/support/recorded_log.py) on
its own subjects, and must:

(a) leave the same rows when the same events are applied again;
(b) commit its checkpoint in the transaction of its rows: a failure before the commit
    (a kill mid-batch, or the commit itself failing) moves neither;
(c) send a poison event, bytes that do not decode or an event Postgres refuses, to the
    dead-letter table with its error, and fold the events after it;
(d) rebuild in a replay's shadow schema exactly what the live projector folded;
(e) answer every query of its read side (projections/<name>/queries.py) from that folded state
    with the type the query says, rows among them.

A fold added to FOLDS is covered with no change here; if the recording has no event
on its subjects, the suite says to re-record (tests/support/record_log.py).
"""

from __future__ import annotations

import importlib
import inspect
import typing
import uuid

import asyncpg
import msgspec
import pytest
import pytest_asyncio
from jetdbt.projections import lag
from jetdbt.projections.loop import Projector, apply_many, checkpoint
from jetdbt.projections.migrate import quote_ident
from jetdbt.projections.registry import FOLDS, TABLES
from jetdbt.projections.replay import replay
from jetdbt.shared.bus import contract
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.process.config import load

from tests.support.helpers import wait_for
from tests.support.projection_pools import running, scratch_pool
from tests.support.recorded_log import Message, publish, put_blobs, recorded, recording

SUBJECTS = contract.load().projections
MARK = "poison_pill"  # a project and run name no recorded row holds

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.parametrize("name", list(FOLDS)),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(tmp_path_factory, pg_url):
    """One stack for the module, its projectors caught up on the recording. Tests read it,
    replay it, or roll back what they change."""
    settings = load(
        {
            "JETDBT_HOME": str(tmp_path_factory.mktemp("contract")),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
        }
    )
    async with recorded(settings) as stack:
        yield stack


def events_of(name: str) -> list[Message]:
    found = recording().on(SUBJECTS[name])
    assert found, (
        f"the recorded log has no event on the {name} fold's subjects: add a step that"
        " publishes one to tests/support/record_log.py and record it again"
    )
    return found


async def rows(conn, name: str) -> dict[str, list[str]]:
    """Every row of the fold's tables, as sorted JSON text, table by table."""
    return {
        t: [
            r[0]
            for r in await conn.fetch(
                f"SELECT to_jsonb(x)::text FROM {quote_ident(t)} x ORDER BY 1"
            )
        ]
        for t in TABLES[name]
    }


async def live_rows(live, name: str) -> dict[str, list[str]]:
    async with live.pool.acquire() as conn:
        found = await rows(conn, name)
    assert any(found.values()), f"the {name} fold wrote nothing from the recording"
    return found


async def test_applying_the_same_events_again_leaves_the_same_rows(live, pg_url, name):
    fold = FOLDS[name](live.bus)
    items = recording().decoded(SUBJECTS[name])
    once = await live_rows(live, name)  # the projector loop folded them once, in its batches
    async with live.pool.acquire() as conn:
        again = conn.transaction()
        await again.start()
        try:
            await apply_many(fold, conn, items)
            twice = await rows(conn, name)
        finally:
            await again.rollback()
    assert twice == once
    # Each event twice in a row, one at a time, from empty.
    async with scratch_pool(pg_url) as pool, pool.acquire() as conn, conn.transaction():
        for event, seq in items:
            await fold.apply(conn, event, seq)
            await fold.apply(conn, event, seq)
        doubled = await rows(conn, name)
    assert doubled == once


async def first_folded(bus, pool, name: str) -> Message:
    """The first of the fold's events (of a project) that makes a row: a fold may pass over
    most events on its subjects (freshness reads only the ends of freshness runs). `bus`
    holds the recording's blobs."""
    fold = FOLDS[name](bus)
    async with pool.acquire() as conn:
        for m in events_of(name):
            event = ev.decode(m.data)
            if not event.project:
                continue
            tx = conn.transaction()
            await tx.start()
            try:
                await fold.apply(conn, event, m.seq)
                made = any((await rows(conn, name)).values())
            finally:
                await tx.rollback()
            if made:
                return m
    raise AssertionError(f"no event of the recording makes a row of the {name} fold")


class KilledMidBatch:
    """A fold whose process dies halfway through a batch (past its first event that makes
    a row), after folding part of it."""

    def __init__(self, fold, first: int):
        self.name = fold.name
        self.fold = fold
        self.first = first  # the stream sequence of the first event that makes a row
        self.written: dict[str, list[str]] = {}

    async def apply(self, conn, event, seq) -> None:
        await self.fold.apply(conn, event, seq)

    async def apply_many(self, conn, items) -> None:
        past_first = next(i for i, (_, seq) in enumerate(items) if seq == self.first) + 1
        await apply_many(self.fold, conn, items[: max(len(items) // 2 + 1, past_first)])
        self.written = await rows(conn, self.name)
        raise ConnectionResetError("killed mid-batch")


# Fails the COMMIT itself, after the rows and the checkpoint are both written.
FAIL_AT_COMMIT = """
CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the server went away at commit'; END $$;
CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT OR UPDATE ON checkpoints
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit();
"""


async def test_the_checkpoint_commits_with_the_rows_or_neither_does(live, pg_url, name):
    msgs = events_of(name)
    pairs, last = [(m.seq, m) for m in msgs], msgs[-1].seq
    fold = FOLDS[name](live.bus)

    async def nothing_moved(pool) -> None:
        async with pool.acquire() as conn:
            assert await checkpoint(conn, name) == 0
            assert not any((await rows(conn, name)).values())

    async with scratch_pool(pg_url) as pool:
        killed = KilledMidBatch(fold, (await first_folded(live.bus, pool, name)).seq)
        with pytest.raises(ConnectionResetError):
            await Projector(live.bus, pool, killed, SUBJECTS[name]).apply_batch(pairs, upto=last)
        assert any(killed.written.values()), "the batch wrote rows before it was killed"
        await nothing_moved(pool)

        projector = Projector(live.bus, pool, fold, SUBJECTS[name])
        async with pool.acquire() as conn:
            await conn.execute(FAIL_AT_COMMIT)
        with pytest.raises(asyncpg.RaiseError, match="went away at commit"):
            await projector.apply_batch(pairs, upto=last)
        await nothing_moved(pool)

        async with pool.acquire() as conn:
            await conn.execute("DROP TRIGGER fail_at_commit ON checkpoints")
        assert await projector.apply_batch(pairs, upto=last) == last
        async with pool.acquire() as conn:
            assert await checkpoint(conn, name) == last
            assert await rows(conn, name) == await live_rows(live, name)


async def caught_up(bus, pool, name: str) -> int:
    """Wait until nothing on the fold's subjects is left after its checkpoint."""

    async def done():
        async with pool.acquire() as conn:
            mark = await checkpoint(conn, name)
        return mark if mark and not await lag.pending(bus.js, SUBJECTS[name], mark) else None

    return await wait_for(done, timeout=20)


def refuse_marked_rows(name: str) -> str:
    """Postgres refuses any row of the fold's tables that mentions MARK: a fold bug, on one
    event only, that the fold itself cannot see coming."""
    triggers = "".join(
        f"CREATE TRIGGER refuse_marked BEFORE INSERT OR UPDATE ON {quote_ident(t)}"
        " FOR EACH ROW EXECUTE FUNCTION refuse_marked();"
        for t in TABLES[name]
    )
    return (
        "CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF to_jsonb(NEW)::text LIKE '%{MARK}%' THEN RAISE EXCEPTION 'refused a marked row'"
        " USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$;" + triggers
    )


async def test_a_poison_event_is_dead_lettered_and_the_events_after_it_fold(nats_url, pg_url, name):
    log = recording().events
    bus = await connect(nats_url, "test")
    await put_blobs(bus, recording())
    async with scratch_pool(pg_url) as pool:
        first = await first_folded(bus, pool, name)
    original = ev.decode(first.data)
    # A copy of it in a project (and run) of its own, so it makes rows of its own.
    marked = msgspec.structs.replace(
        original, **{k: MARK for k in ("project", "run_id") if getattr(original, k, None)}
    )
    poison = [
        Message(stream=EVENTS, seq=0, subject=first.subject, headers={}, data=b"not json"),
        Message(
            stream=EVENTS,
            seq=0,
            subject=marked.subject(),
            headers={"Nats-Msg-Id": marked.event_id()},
            data=ev.encode(marked),
        ),
    ]
    at = log.index(first) + 1  # amid the fold's events: one before, the rest after
    stream = [*log[:at], *poison, *log[at:]]
    fold = FOLDS[name](bus)
    try:
        seqs = await publish(bus, stream)
        async with scratch_pool(pg_url) as pool, scratch_pool(pg_url) as clean:
            async with pool.acquire() as conn:
                await conn.execute(refuse_marked_rows(name))
            async with running(Projector(bus, pool, fold, SUBJECTS[name])):
                await caught_up(bus, pool, name)
            async with pool.acquire() as conn:
                dead = await conn.fetch("SELECT * FROM dead_letters ORDER BY stream_seq")
                folded = await rows(conn, name)
            assert [(d["projector"], d["stream_seq"], d["subject"], d["data"]) for d in dead] == [
                (name, seqs[at + i], m.subject, m.data) for i, m in enumerate(poison)
            ]
            assert dead[0]["error"].startswith("DecodeError")
            assert dead[1]["error"].startswith("CheckViolationError: refused a marked row")

            # The events after the poison folded: the rows are those of the same log without it.
            unpoisoned = Projector(bus, clean, fold, SUBJECTS[name])
            await unpoisoned.apply_batch(
                [
                    (s, m)
                    for i, (s, m) in enumerate(zip(seqs, stream, strict=True))
                    if unpoisoned.wants(m.subject) and not at <= i < at + len(poison)
                ]
            )
            async with clean.acquire() as conn:
                assert folded == await rows(conn, name)
            assert any(folded.values())
    finally:
        await bus.close()


async def test_a_replay_rebuilds_what_the_live_projector_folded(live, name):
    assert FOLDS[name](live.bus).name == name, "checkpoints and dead letters go by this name"
    report = await replay(live.bus, live.database_url, live.settings.schema, [name])
    [built] = report.projections
    assert built.events == len(events_of(name))
    assert built.checkpoint == built.live_checkpoint >= events_of(name)[-1].seq
    assert {t.table for t in report.tables} == set(TABLES[name])
    assert sum(t.live_rows for t in report.tables) > 0
    assert report.differences == 0, [d for t in report.tables for d in t.shown]


async def _samples(conn, name: str) -> dict:
    """A value for each parameter a query takes, read from what the recording folded: the
    project with the most rows of this fold's first table that has projects, its latest run
    with nodes, its graph's version and a relation."""
    with_projects = await conn.fetch(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND column_name = 'project'"
    )
    table = next(t for t in TABLES[name] if t in {r[0] for r in with_projects})
    project = await conn.fetchval(
        f"SELECT project FROM {quote_ident(table)} GROUP BY project ORDER BY count(*) DESC LIMIT 1"
    )
    node = await conn.fetchrow(
        "SELECT n.run_id, n.unique_id FROM run_nodes n JOIN runs r USING (run_id)"
        " WHERE r.project = $1 ORDER BY r.requested_at DESC LIMIT 1",
        project,
    )
    version = await conn.fetchval(
        "SELECT version FROM graph_versions WHERE project = $1 ORDER BY ingested_at DESC LIMIT 1",
        project,
    )
    relation = await conn.fetchval(
        "SELECT relation FROM graph_nodes WHERE project = $1 AND relation <> '' LIMIT 1", project
    )
    hook = await conn.fetchval("SELECT name FROM hooks WHERE project = $1 LIMIT 1", project)
    run_id, unique_id = (node["run_id"], node["unique_id"]) if node else ("", "")
    return {
        "project": project,
        "projects": [project],
        "run_id": run_id,
        "unique_id": unique_id,
        "unique_ids": [unique_id],
        "version": version or "",
        "versions": [version or ""],
        "key": relation or "",
        "relations": [relation or ""],
        "hook": hook or "",
        "limit": 50,
        "offset": 0,
        "shown": 5,
        "bounds": (1.0, 60.0),
        "team": None,
        "environment": None,
        "state": None,
        "after": None,
        "projection": None,
    }


async def test_every_query_answers_from_the_folded_state_with_its_type(live, name):
    queries = importlib.import_module(f"jetdbt.projections.{name}.queries")
    functions = [
        f for f in (getattr(queries, n) for n in queries.__all__) if inspect.iscoroutinefunction(f)
    ]
    assert functions, f"projections/{name}/queries.py lists no query"
    answered = []
    async with live.pool.acquire() as conn:
        samples = await _samples(conn, name)
        for query in functions:
            wanted = list(inspect.signature(query).parameters.values())[1:]
            required = [p.name for p in wanted if p.default is inspect.Parameter.empty]
            assert set(required) <= set(samples), f"{query.__name__}: no sample for {required}"
            got = await query(conn, **{n: samples[n] for n in required})
            said = typing.get_type_hints(query)["return"]
            msgspec.json.decode(msgspec.json.encode(got), type=said)
            answered.append(bool(got))
    assert any(answered), f"no query of {name} answered with rows from the recording"

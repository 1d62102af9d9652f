"""The projector loop against real NATS and Postgres: duplicates, restarts, poison events."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
import structlog.testing
from jetdbt.projections.loop import FoldBug, Projector, checkpoint
from jetdbt.projections.progress.fold import ProgressFold
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import EVENTS

from tests.support.helpers import wait_for
from tests.support.projection_pools import running, scratch_pool

SUBJECTS = ["dbt.evt.run.>", "dbt.evt.node.>"]
PROJECT = "p"
T0 = datetime(2025, 6, 2, 9, 30, tzinfo=UTC)


@pytest.fixture
async def bus(nats_url):
    b = await connect(nats_url, "test")
    yield b
    await b.close()


@pytest.fixture
async def pool(pg_url):
    async with scratch_pool(pg_url) as p:
        yield p


class Recording:
    """A fold that remembers which stream sequences it was asked to apply."""

    def __init__(self, fold, hang_at: int | None = None):
        self.name = fold.name
        self.fold = fold
        self.hang_at = hang_at
        self.seqs: list[int] = []
        self.hung = asyncio.Event()

    async def apply(self, conn, event, seq):
        if self.hang_at is not None and seq >= self.hang_at:
            self.hung.set()
            await asyncio.Event().wait()  # stuck mid-transaction until cancelled
        await self.fold.apply(conn, event, seq)
        self.seqs.append(seq)


async def last_seq(bus) -> int:
    return (await bus.js.stream_info(EVENTS)).state.last_seq


async def saved_checkpoint(pool, name: str = "progress") -> int:
    async with pool.acquire() as conn:
        return await checkpoint(conn, name)


async def caught_up(bus, pool) -> int:
    """Wait until the checkpoint reaches the stream's last sequence."""
    target = await last_seq(bus)

    async def reached():
        return await saved_checkpoint(pool) >= target

    await wait_for(reached, timeout=20)
    return target


def _at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def run_requested(run_id: str) -> ev.RunRequested:
    return ev.RunRequested(project=PROJECT, run_id=run_id, at=T0, command={"label": "build"})


def node_started(run_id: str, i: int) -> ev.NodeStarted:
    return ev.NodeStarted(
        project=PROJECT,
        run_id=run_id,
        attempt=1,
        at=_at(i),
        unique_id=f"model.p.m{i}",
        resource_type="model",
        name=f"m{i}",
        started_at=_at(i),
    )


def node_result(i: int) -> ev.NodeResult:
    return ev.NodeResult(
        unique_id=f"model.p.m{i}",
        status="success",
        outcome="passed",
        resource_type="model",
        name=f"m{i}",
        rows_affected=i,
        started_at=_at(i),
        finished_at=_at(i) + timedelta(milliseconds=500),
    )


def node_finished(run_id: str, i: int) -> ev.NodeFinished:
    return ev.NodeFinished(
        project=PROJECT, run_id=run_id, attempt=1, at=_at(i), node=node_result(i)
    )


async def fetch_run(pool, run_id: str):
    async with pool.acquire() as conn:
        run = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1", run_id)
        nodes = await conn.fetch(
            "SELECT * FROM run_nodes WHERE run_id = $1 ORDER BY unique_id", run_id
        )
    return run, nodes


async def test_an_event_published_twice_is_projected_once(bus, pool):
    run_id = "r1"
    nodes = range(3)
    await bus.publish(run_requested(run_id))
    await bus.publish(ev.RunStarted(project=PROJECT, run_id=run_id, attempt=1, version="v1"))
    for i in nodes:
        await bus.publish(node_started(run_id, i))
        await bus.publish(node_finished(run_id, i))
    totals = {"passed": 3, "warned": 0, "failed": 0, "errored": 0, "skipped": 0}
    result = ev.RunResult(
        status="passed",
        engine="dbt-core-1x",
        engine_version="1.10.4",
        mode="build",
        totals=totals,
        nodes=[node_result(i) for i in nodes],
        exit_code=0,
    )
    await bus.publish(ev.RunFinished(project=PROJECT, run_id=run_id, attempt=1, result=result))

    # A late repeat of node m1: once with its own id (the stream drops it) ...
    repeat = node_finished(run_id, 1)
    before = await last_seq(bus)
    ack = await bus.publish(repeat)
    assert ack.duplicate and await last_seq(bus) == before
    # ... and once under another id, so it does reach the projector.
    ack = await bus.js.publish(
        repeat.subject(), ev.encode(repeat), headers={"Nats-Msg-Id": "other-id"}
    )
    assert not ack.duplicate and ack.seq == before + 1

    fold = Recording(ProgressFold())
    async with running(Projector(bus, pool, fold, SUBJECTS)):
        target = await caught_up(bus, pool)
    assert fold.seqs == list(range(1, target + 1))

    run, rows = await fetch_run(pool, run_id)
    assert [r["unique_id"] for r in rows] == [f"model.p.m{i}" for i in nodes]
    assert all(r["status"] == "success" and r["outcome"] == "passed" for r in rows)
    assert run["status"] == "passed" and run["totals"] == totals
    assert run["nodes_started"] == 3
    assert run["nodes_finished"] == 3


async def test_a_restarted_projector_resumes_from_its_checkpoint(bus, pool):
    run_id = "r2"
    await bus.publish(run_requested(run_id))
    for i in range(10):
        await bus.publish(node_started(run_id, i))
        await bus.publish(node_finished(run_id, i))
    assert await last_seq(bus) == 21

    # Batches of at most 5: the one holding seq 13 hangs there, mid-transaction, and the
    # task is killed. A batch takes what has landed, so it starts somewhere in 9-13 and
    # the checkpoint is the end of the batch before it.
    first = Recording(ProgressFold(), hang_at=13)
    task = asyncio.create_task(Projector(bus, pool, first, SUBJECTS, batch=5).run())
    await asyncio.wait_for(first.hung.wait(), 10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert first.seqs == list(range(1, 13))
    committed = await saved_checkpoint(pool)
    assert 8 <= committed <= 12

    # Exactly the committed prefix is projected: seq 1 requested the run, seqs 2+2i
    # and 3+2i started and finished node m{i}.
    started = sum(1 for i in range(10) if 2 + 2 * i <= committed)
    finished = sum(1 for i in range(10) if 3 + 2 * i <= committed)
    run, rows = await fetch_run(pool, run_id)
    assert run["nodes_started"] == started and run["nodes_finished"] == finished
    assert len(rows) == started

    for i in range(10, 15):
        await bus.publish(node_started(run_id, i))
        await bus.publish(node_finished(run_id, i))
    second = Recording(ProgressFold())
    async with running(Projector(bus, pool, second, SUBJECTS, batch=5)):
        target = await caught_up(bus, pool)
    assert target == 31
    assert second.seqs == list(range(committed + 1, 32))
    assert await saved_checkpoint(pool) == target

    run, rows = await fetch_run(pool, run_id)
    assert len(rows) == 15
    assert run["nodes_started"] == 15 and run["nodes_finished"] == 15
    assert all(r["finished_at"] is not None for r in rows)


async def test_malformed_events_are_dead_lettered_and_later_events_project(bus, pool):
    subject = "dbt.evt.run.p.r9.started"
    wrong_type = b'{"type": "run.started.v1", "project": 1}'
    not_json = b"not json"
    bad1 = await bus.js.publish(subject, wrong_type)
    bad2 = await bus.js.publish(subject, not_json)
    await bus.publish(run_requested("r9"))
    await bus.publish(ev.RunStarted(project=PROJECT, run_id="r9", attempt=1, version="v1"))

    async with running(Projector(bus, pool, ProgressFold(), SUBJECTS)):
        await caught_up(bus, pool)

    async with pool.acquire() as conn:
        dead = await conn.fetch("SELECT * FROM dead_letters ORDER BY stream_seq")
    assert [(d["projector"], d["stream_seq"], d["subject"], d["data"]) for d in dead] == [
        ("progress", bad1.seq, subject, wrong_type),
        ("progress", bad2.seq, subject, not_json),
    ]
    assert dead[0]["error"].startswith("ValidationError")
    assert "`$.project`" in dead[0]["error"] and "Expected `str`" in dead[0]["error"]
    assert dead[1]["error"].startswith("DecodeError") and "malformed" in dead[1]["error"]

    run, _ = await fetch_run(pool, "r9")
    assert run["status"] == "running" and run["version"] == "v1"


async def test_an_event_postgres_refuses_is_dead_lettered_whole(bus, pool):
    """Valid on the wire, refused by a column type: its earlier statements roll back too."""
    await bus.publish(run_requested("r7"))
    huge = ev.NodeResult(
        unique_id="model.p.huge", status="success", outcome="passed", failures=2**40
    )
    result = ev.RunResult(
        status="passed",
        engine="dbt-core-1x",
        engine_version="1.10.4",
        mode="build",
        totals={"passed": 2},
        nodes=[node_result(0), huge],  # failures is an integer column: 2**40 overflows it
        exit_code=0,
    )
    poisoned = await bus.publish(
        ev.RunFinished(project=PROJECT, run_id="r7", attempt=1, result=result)
    )
    await bus.publish(node_started("r7", 5))

    async with running(Projector(bus, pool, ProgressFold(), SUBJECTS)):
        await caught_up(bus, pool)

    async with pool.acquire() as conn:
        dead = await conn.fetch("SELECT stream_seq, error FROM dead_letters")
    assert [d["stream_seq"] for d in dead] == [poisoned.seq]
    assert "out of range for type integer" in dead[0]["error"]
    assert str(2**40) in dead[0]["error"]
    # Neither the run row's update nor node m0 (applied before the failure) survive.
    run, rows = await fetch_run(pool, "r7")
    assert run["status"] == "requested" and run["result"] is None
    assert [r["unique_id"] for r in rows] == ["model.p.m5"]
    assert run["nodes_started"] == 1 and run["nodes_finished"] == 0


async def test_a_fold_reads_one_covering_filter_and_skips_other_subjects(bus, pool):
    """JetStream serves one filter subject ~10x faster than several, so the progress fold
    filters on `dbt.evt.>`: another projection's event is not applied but is passed."""
    await bus.publish(run_requested("r8"))
    other = await bus.publish(
        ev.DeployRequested(
            project=PROJECT, deploy_id="d1", bundle_digest="sha256:" + "0" * 64, bundle_size=1
        )
    )
    await bus.publish(node_started("r8", 0))

    fold = Recording(ProgressFold())
    async with running(Projector(bus, pool, fold, SUBJECTS)):
        target = await caught_up(bus, pool)
        filters = [
            (c.config.filter_subject, c.config.filter_subjects)
            for c in await bus.js.consumers_info(EVENTS)
            if c.config.description == "proj-progress"
        ]
    assert filters == [("dbt.evt.>", None)]
    assert fold.seqs == [s for s in range(1, target + 1) if s != other.seq]
    assert await saved_checkpoint(pool) == target
    run, rows = await fetch_run(pool, "r8")
    assert run["nodes_started"] == 1 and [r["unique_id"] for r in rows] == ["model.p.m0"]


class _Planted:
    """The progress fold with a bug planted: it cannot apply run r2's request."""

    name = "progress"

    def __init__(self):
        self.fold = ProgressFold()
        self.fixed = False

    async def apply(self, conn, event, seq):
        if getattr(event, "run_id", "") == "r2" and not self.fixed:
            raise KeyError("planted")
        await self.fold.apply(conn, event, seq)


async def test_a_bug_in_a_fold_stops_its_batch_at_that_event_and_keeps_what_came_before(bus, pool):
    """One batch of four; the fold's bug is on the second. The first is folded and the
    checkpoint stays before the second, which is no dead letter, nor are the bytes after it
    that do not decode: the row says why, since the first time it was tried. The log says
    so once, with the traceback, however often it is tried, and once that it resumed."""
    data = [ev.encode(run_requested("r1")), ev.encode(run_requested("r2")), b"not json"]
    data.append(ev.encode(run_requested("r3")))
    pairs = [
        (seq, SimpleNamespace(subject="dbt.evt.run.p.r.requested", data=d))
        for seq, d in enumerate(data, start=1)
    ]
    with structlog.testing.capture_logs() as logs:
        projector = Projector(bus, pool, _Planted(), SUBJECTS)
        since = []
        for _ in range(2):
            with pytest.raises(FoldBug, match=r"KeyError: 'planted' \(at event 2\)"):
                await projector.apply_batch(pairs)
            async with pool.acquire() as conn:
                since.append(
                    await conn.fetchval(
                        "SELECT stopped_since FROM checkpoints WHERE projector = 'progress'"
                    )
                )
        assert since[0] is not None and since == [since[0]] * 2
        assert await saved_checkpoint(pool) == 1
        assert [(await fetch_run(pool, r))[0] is not None for r in ("r1", "r2", "r3")] == [
            True, False, False
        ]  # fmt: skip
        async with pool.acquire() as conn:
            stopped = await conn.fetchval(
                "SELECT stopped FROM checkpoints WHERE projector = 'progress'"
            )
            assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
        assert stopped == "KeyError: 'planted' (at event 2)"
        said = [e for e in logs if e["event"] == "projection_stopped"]
        assert len(said) == 1 and isinstance(said[0]["exc_info"], KeyError), logs

        projector.fold.fixed = True
        assert await projector.apply_batch(pairs) == 4
        said = [e["event"] for e in logs if e["event"] != "dead_letter"]
        assert said == ["projection_stopped", "projection_resumed"], logs
        assert await saved_checkpoint(pool) == 4
        async with pool.acquire() as conn:  # the bytes past the bug, once the fold went on
            assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 1

"""Which of a node's results stands, when a runner dies after an in-run node retry.

Attempt 1 rebuilds a failed node in retry round 1, then its runner dies; attempt 2
starts over and round 0 finishes the node. The later attempt supersedes everything
of the earlier one, so the progress projection and the audit (which both rank by
jetdbt.shared.runs.outcomes.precedence) show attempt 2's result.
"""

from __future__ import annotations

import pytest
from jetdbt.projections.migrate import connect_pool
from jetdbt.projections.progress.fold import ProgressFold
from jetdbt.services.audit import run_history as audit
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.runs.outcomes import precedence

from tests.support.synthetic import T0

RUN = {"project": "p", "run_id": "r1", "at": T0}
NODE = "model.p.flaky"


@pytest.fixture
async def pool(settings):
    """The progress tables in the test's own schema, with no projector folding into them."""
    p = await connect_pool(settings.database_url, settings.schema)
    yield p
    await p.close()


def _result(status: str, outcome: str, round_: int) -> ev.NodeResult:
    return ev.NodeResult(
        unique_id=NODE, status=status, outcome=outcome, round=round_, finished_at=T0
    )


def _round(attempt: int, round_: int, status: str, outcome: str) -> list[ev.Event]:
    return [
        ev.NodeStarted(**RUN, attempt=attempt, unique_id=NODE, round=round_, started_at=T0),
        ev.NodeFinished(**RUN, attempt=attempt, node=_result(status, outcome, round_)),
    ]


def _history() -> list[ev.Event]:
    passed = _result("success", "passed", 0)
    return [
        ev.RunRequested(**RUN, command={"label": "build"}, requested_by="ann"),
        ev.RunStarted(**RUN, attempt=1, version="v1", runner="a"),
        *_round(1, 0, "error", "failed"),
        *_round(1, 1, "error", "failed"),
        ev.RunAttemptLost(**RUN, attempt=1),
        ev.RunStarted(**RUN, attempt=2, version="v1", runner="b"),
        *_round(2, 0, "success", "passed"),
        ev.RunFinished(
            **RUN,
            attempt=2,
            result=ev.RunResult(
                status="passed",
                engine="dbt-core-1x",
                engine_version="1.10.4",
                mode="build",
                totals={"passed": 1},
                nodes=[passed],
                exit_code=0,
            ),
        ),
    ]


def test_a_later_attempt_outranks_every_round_of_an_earlier_one():
    assert precedence(2, 0) > precedence(1, 1) > precedence(1, 0)


@pytest.mark.parametrize("batch", [1, 100], ids=["event_by_event", "one_batch"])
@pytest.mark.parametrize("upto", [-1, None], ids=["before_run_finished", "whole_run"])
async def test_the_projection_shows_the_later_attempt(pool, batch, upto):
    events = _history()[:upto]
    fold = ProgressFold()
    async with pool.acquire() as conn:
        for start in range(0, len(events), batch):
            chunk = events[start : start + batch]
            async with conn.transaction():
                await fold.apply_many(conn, [(e, start + i + 1) for i, e in enumerate(chunk)])
        row = await conn.fetchrow("SELECT * FROM run_nodes WHERE unique_id = $1", NODE)
    assert (row["attempt"], row["round"], row["outcome"]) == (2, 0, "passed")


async def test_the_audit_shows_the_later_attempt(nats_url):
    bus = await connect(nats_url, "test")
    try:
        for event in _history():
            await bus.publish(event)
        h = await audit.run_history(bus, "r1", "p")
    finally:
        await bus.close()
    assert [(n.attempt, n.round, n.outcome) for n in h.nodes] == [(2, 0, "passed")]
    assert [(n.attempt, n.round, n.outcome) for n in h.retries] == [
        (1, 0, "failed"),
        (1, 1, "failed"),
    ]

"""`jetdbt audit run` against real NATS: a run's whole history read from the log, recorded
from real dbt runs (tests/support/recorded_log.py) or written by hand.
tests/with_dbt/test_replay.py audits a run of real dbt too."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from jetdbt.services.audit import run_history as audit
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import COMMANDS
from jetdbt.shared.project.environments import Environment

from tests.support import recorded_log
from tests.support.recorded_log import recording
from tests.support.synthetic import T0

BIN = Path(sys.executable).parent
recorded_stack = recorded_log.recorded_stack  # a fixture


async def test_audit_of_recorded_real_runs_reads_the_whole_history(recorded_stack):
    """The recorded log (tests/support/recorded_log.py): ann's build failing an error-severity test,
    its retry, a build of a project never deployed, a run command with a misspelt key."""
    stack, log = recorded_stack, recording()
    failed = log.runs["failed"]

    h = await audit.run_history(stack.bus, failed)
    assert (h.project, h.status, h.requested_by) == ("jaffle_shop", "failed", "ann")
    assert h.command.stream == COMMANDS and h.command.subject == "dbt.cmd.run.jaffle_shop"
    assert h.command.payload["command"] == {
        "label": "build",
        "select": [],
        "exclude": [],
        "vars": {"fail_error_test": True},
        "full_refresh": False,
        "defer": None,
    }
    assert h.command.payload["run_id"] == failed
    assert h.arguments["vars"] == {"fail_error_test": True}
    [attempt] = h.attempts
    assert (attempt.attempt, attempt.ended, attempt.status) == (1, "finished", "failed")
    assert attempt.version == log.meta["version"] and attempt.exit_code == 1
    outcomes = {n.unique_id: n.outcome for n in h.nodes}
    assert len(outcomes) == 23 and h.retries == []
    assert outcomes["test.jaffle_shop.assert_positive_order_total"] == "failed"
    assert outcomes["model.jaffle_shop.orders"] == "passed"
    assert h.deferred_to is None and h.published_state == []
    # The command first, then every event of the run in stream order.
    assert h.entries[0] == h.command
    seqs = [e.seq for e in h.entries[1:]]
    assert seqs == sorted(seqs) and h.entries[1].seq > 0
    types = [e.type for e in h.entries[1:]]
    assert types[:2] == ["run.requested.v1", "run.started.v1"]
    assert types[-1] == "run.finished.v1"
    assert {"node.started.v1", "node.finished.v1"} <= set(types)

    r = await audit.run_history(stack.bus, log.runs["refused"])
    assert (r.status, r.project, r.attempts, r.nodes) == ("refused", "never_deployed", [], [])
    assert "has no deployed version" in r.refused_reason and r.command is not None

    m = await audit.run_history(stack.bus, log.runs["malformed"])  # c<command sequence>
    assert m.status == "refused" and m.project == "jaffle_shop"
    assert f"c{m.command.seq}" == log.runs["malformed"] and m.arguments is None
    assert "selct" in m.refused_reason and m.command.payload["command"]["selct"] == []

    # The passing build published its state; the retry names the run it resumed.
    passed = await audit.run_history(stack.bus, log.runs["passed"])
    [state] = passed.published_state
    assert passed.status == "passed" and state.type == "state.published.v1"
    again = await audit.run_history(stack.bus, log.runs["retried"])
    assert again.arguments == {"label": "retry", "dbt_retry_job": failed}
    assert again.status == "failed" and len(again.nodes) == 5

    env = {**os.environ, "NATS_URL": stack.nats_url}
    cli = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / "jetdbt"), "audit", "run", failed, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == json.loads(msgspec.json.encode(h))
    text = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / "jetdbt"), "audit", "run", failed],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"run {failed} of jaffle_shop: failed" in text.stdout
    assert "requested by ann" in text.stdout and "fail_error_test" in text.stdout


@pytest.fixture
async def bus(nats_url):
    """A bus with no runner behind it, so a command published here stays unconsumed."""
    b = await connect(nats_url, "test")
    yield b
    await b.close()


def _node(status: str, outcome: str, round_: int) -> ev.NodeResult:
    return ev.NodeResult(
        unique_id="model.p.flaky", status=status, outcome=outcome, round=round_, finished_at=T0
    )


async def test_audit_shows_attempts_retry_rounds_cancels_and_published_state(bus):
    async def command(verb: str, body: dict) -> int:
        ack = await bus.js.publish(subjects.command(verb, "p", "bob"), msgspec.json.encode(body))
        return ack.seq

    cmd_seq = await command("run", {"command": {"label": "build"}, "run_id": "r1"})
    await command("cancel", {"run_id": "other"})
    cancel_seq = await command("cancel", {"run_id": "r1"})
    env = Environment(warehouse="main", target="dev", schema="main", database="main")
    run = {"project": "p", "run_id": "r1", "at": T0}
    result = ev.RunResult(
        status="passed",
        engine="dbt-core-1x",
        engine_version="1.10.4",
        mode="build",
        totals={"passed": 1},
        nodes=[_node("success", "passed", 1)],
        exit_code=0,
        deferred_to="state of run r0",
    )
    for event in (
        ev.RunRequested(**run, command={"label": "build"}, requested_by="bob", command_seq=cmd_seq),
        ev.RunStarted(**run, attempt=1, version="v1", runner="a"),
        ev.NodeFinished(**run, attempt=1, node=_node("error", "failed", 0)),
        ev.RunRequested(project="p", run_id="r2", command={}, at=T0),  # another run
        ev.RunAttemptLost(**run, attempt=1),
        ev.RunStarted(**run, attempt=2, version="v1", runner="b"),
        ev.NodeFinished(**run, attempt=2, node=_node("error", "failed", 0)),
        ev.NodeFinished(**run, attempt=2, node=_node("success", "passed", 1)),
        ev.RunFinished(**run, attempt=2, result=result),
        ev.StatePublished(
            project="p",
            at=T0,
            environment=env,
            run_id="r1",
            version="v1",
            manifest_digest="sha256:m",
            manifest_size=1,
        ),  # fmt: skip
    ):
        await bus.publish(event)

    h = await audit.run_history(bus, "r1", "p")
    assert (h.status, h.requested_by, h.deferred_to) == ("passed", "bob", "state of run r0")
    assert [(a.attempt, a.runner, a.ended) for a in h.attempts] == [
        (1, "a", "lost"),
        (2, "b", "finished"),
    ]
    [node] = h.nodes
    assert (node.attempt, node.round, node.outcome) == (2, 1, "passed")
    assert [(n.attempt, n.round, n.outcome) for n in h.retries] == [
        (1, 0, "failed"),
        (2, 0, "failed"),
    ]
    [state] = h.published_state
    assert state.type == "state.published.v1" and state.payload["manifest_digest"] == "sha256:m"
    assert [(e.stream, e.seq) for e in h.entries[:2]] == [
        (COMMANDS, cmd_seq),
        (COMMANDS, cancel_seq),
    ]
    assert [e.type for e in h.entries[2:]] == [
        "run.requested.v1",
        "run.started.v1",
        "node.finished.v1",
        "run.attempt_lost.v1",
        "run.started.v1",
        "node.finished.v1",
        "node.finished.v1",
        "run.finished.v2",
        "state.published.v1",
    ]
    with pytest.raises(ValueError, match="no events for run 'nope'"):
        await audit.run_history(bus, "nope")

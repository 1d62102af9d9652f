"""One build per environment: runs of one project never build at the same time, and a
run that waits for the environment is not an attempt of its own."""

from __future__ import annotations

import asyncio

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.helpers import deploy_and_wait

pytestmark = pytest.mark.dbt


async def test_runs_of_one_environment_take_turns(stack):
    await deploy_and_wait(stack.bus, "examples/jaffle_shop", "turns")
    seen: list[ev.Event] = []

    async def on_event(event):
        seen.append(event)

    finals = await asyncio.gather(
        *(
            client.run(
                stack.bus,
                "turns",
                RunCommand(command=BuildCommand(), run_id=f"turn{i}"),
                on_event=on_event,
            )
            for i in range(3)
        )
    )
    assert [f.result.status for f in finals] == ["passed"] * 3, [
        [(n.unique_id, n.message) for n in f.result.nodes if n.outcome == "failed"] for f in finals
    ]
    assert all(f.attempt == 1 for f in finals)  # waiting was not an attempt
    assert not [e for e in seen if isinstance(e, ev.RunAttemptLost)]
    spans = []
    for f in finals:
        times = [t for n in f.result.nodes for t in (n.started_at, n.finished_at) if t]
        spans.append((min(times), max(times)))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans

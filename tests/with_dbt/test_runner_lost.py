"""A runner that dies mid-run is noticed by redelivery; the next attempt says so and runs.

Its dbt dies with it: no orphan goes on writing to the warehouse while the next
attempt builds."""

from __future__ import annotations

import asyncio
import os
import signal

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.gate import add_gate, until_gate_runs
from tests.support.helpers import deploy_and_wait, get_json, wait_for
from tests.support.processes import runner_process, runners_apart, sweep_after_kill, working_in

pytestmark = pytest.mark.dbt


async def test_a_killed_runner_is_replaced_by_the_next_attempt(settings, tmp_path, project_copy):
    release = tmp_path / "release"
    add_gate(project_copy, release)
    base, warehouses = runners_apart(settings, tmp_path)
    reader = await Stack(base, runner=False).start()
    runner_a = runner_process(base, tmp_path / "a", warehouses)
    runner_b = None
    try:
        await deploy_and_wait(reader.bus, project_copy, "lost")
        seen: list[ev.Event] = []

        async def on_event(event):
            seen.append(event)

        run = asyncio.create_task(
            client.run(
                reader.bus,
                "lost",
                RunCommand(command=BuildCommand(), run_id="lost1"),
                on_event=on_event,
            )
        )

        await until_gate_runs(reader.api_url, "lost1")
        assert working_in(tmp_path / "a"), "dbt should be building in runner a's job folder"
        os.kill(runner_a.pid, signal.SIGKILL)  # the runner alone: its dbt must die with it

        async def orphans_gone():
            return not working_in(tmp_path / "a")

        await wait_for(orphans_gone, timeout=5, interval=0.05)
        release.touch()
        runner_b = await Stack(
            msgspec.structs.replace(base, home=tmp_path / "b", runner_name="runner-b"),
            projectors=False,
            api=False,
        ).start()
        final = await asyncio.wait_for(run, 180)
        assert final.result.status == "passed", final.result.error
        assert final.attempt == 2
        lost = [e for e in seen if isinstance(e, ev.RunAttemptLost)]
        started = [e for e in seen if isinstance(e, ev.RunStarted)]
        assert [e.attempt for e in lost] == [1]
        assert [(e.attempt, e.runner) for e in started] == [(1, "runner-a"), (2, "runner-b")]

        async def projected():
            status, body = await get_json(f"{reader.api_url}/v1/runs/lost1")
            return body if body.get("status") == "passed" else None

        body = await wait_for(projected)
        assert body["lost_attempts"] == [1] and body["attempt"] == 2
    finally:
        if runner_a.poll() is None:
            os.killpg(runner_a.pid, signal.SIGKILL)
        sweep_after_kill(runner_a, tmp_path / "a")
        if runner_b is not None:
            await runner_b.stop()
        await reader.stop()

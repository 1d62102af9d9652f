"""MAX_RUNS_PER_RUNNER: a runner builds at most its share at once; a run whose turn comes
while its runner is full goes back to the stream, and another runner takes it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.events_seen import Events
from tests.support.helpers import deploy_and_wait
from tests.support.slow_project import duckdb_warehouses, tiny_project

pytestmark = pytest.mark.dbt


async def test_a_full_runner_leaves_the_next_run_to_another(settings, tmp_path):
    release = tmp_path / "release"
    base = msgspec.structs.replace(
        settings,
        warehouses_file=duckdb_warehouses(tmp_path, ["wa", "wb"]),
        max_runs_per_runner=1,
        runner_name="runner-a",
    )
    a = await Stack(base).start()
    b = None
    seen = Events()
    sub = await a.bus.nc.subscribe("dbt.evt.>", cb=seen.on_msg)
    try:
        for project, warehouse in (("pa", "wa"), ("pb", "wb")):
            folder = tiny_project(tmp_path / project, 0.1, warehouse, release)
            await deploy_and_wait(a.bus, folder, project)
        for project in ("pa", "pb"):  # different environments: both could build at once
            command = RunCommand(command=BuildCommand(), run_id=f"{project}1", requested_by="ana")
            await a.bus.publish_command("run", project, command, f"{project}1", principal="ana")
        first = await seen.first(lambda e: isinstance(e, ev.RunStarted), timeout=60)
        other = "pb1" if first.run_id == "pa1" else "pa1"
        await asyncio.sleep(3)  # runner a is full: the other run goes back, again and again
        assert not [e for e in seen.seen if isinstance(e, ev.RunStarted) and e.run_id == other]
        b = await Stack(
            msgspec.structs.replace(base, home=tmp_path / "b", runner_name="runner-b"),
            projectors=False,
            api=False,
        ).start()
        second = await seen.first(
            lambda e: isinstance(e, ev.RunStarted) and e.run_id == other, timeout=60
        )
        assert not [e for e in seen.seen if isinstance(e, ev.RunFinished)], "both at once"
        release.touch()
        for run_id in ("pa1", "pb1"):
            final = await seen.first(
                lambda e, r=run_id: isinstance(e, ev.RunFinished) and e.run_id == r, timeout=60
            )
            assert final.result.status == "passed", final.result.error
        started = [
            (e.run_id, e.attempt, e.runner) for e in seen.seen if isinstance(e, ev.RunStarted)
        ]
        assert started == [(first.run_id, 1, "runner-a"), (other, 1, "runner-b")]
        assert second.runner == "runner-b"
    finally:
        release.touch()
        await sub.unsubscribe()
        if b is not None:
            await b.stop()
        await a.stop()

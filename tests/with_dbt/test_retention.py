"""Retention: the newest RUN_RETENTION finished runs of an environment keep their files,
older ones lose them (announced by run.pruned first), the state-publishing run keeps
its files, a blob another run or a deployed version names is never deleted, and runner
replicas changing one index at once lose no entry."""

from __future__ import annotations

import asyncio
import os

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.runner.after import retention
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import RETENTION
from jetdbt.shared.project.environments import Environment
from jetdbt.shared.runs import run_logs
from nats.js.errors import NotFoundError

from tests.support.helpers import deploy_and_wait, get_json, wait_for

ENV = Environment(warehouse="main", target="dev", schema="main", database="warehouse")
OTHER = Environment(warehouse="main", target="prod", schema="main", database="warehouse")
# The acceptance figure (RUN_RETENTION 30, 35 runs after the state-publishing one) takes
# minutes of dbt; the suite runs the same rule at 2, and this flag runs it at 30.
FULL = os.environ.get("JETDBT_RETENTION_FULL") == "1"


async def _exists(store, name: str) -> bool:
    try:
        await store.get_info(name)
    except NotFoundError:
        return False
    return True


async def _record(bus, keep: int, run_id: str, objects: list[str], env=ENV) -> list[str]:
    return await retention.record_and_prune(
        bus,
        keep,
        project="p",
        scope=env.key(),
        environment=env,
        run=retention.Kept(run_id=run_id, principal="ana", objects=objects),
    )


async def _index(bus, env=ENV) -> list[str]:
    kv = await bus.js.key_value(RETENTION)
    entry = await kv.get(retention.index_key("p", env.key()))
    return [k.run_id for k in msgspec.json.decode(entry.value, type=retention.Index).runs]


async def test_pruning_spares_shared_blobs_and_the_pinned_run(nats_url):
    bus = await connect(nats_url, "retention-test")
    try:
        store = await bus.js.object_store("DBT_BLOBS")
        other_run, deployed, own = [await bus.put_blob(x) for x in (b"a", b"b", b"c")]
        await bus.publish(
            ev.Deployed(
                project="q", deploy_id="d1", version="sha256:" + "0" * 64, bundle_size=1,
                manifest_digest=deployed, manifest_size=1, engine="dbt-core-1x",
                engine_version="1", adapter="duckdb", adapter_version="1", files=[],
            )
        )  # fmt: skip
        await _record(bus, 2, "y1", [other_run], env=OTHER)
        for run_id in ("r1", "r2", "r3"):
            await store.put(run_logs.object_name(run_id), b"{}")
            await bus.publish_line(subjects.run_log(run_id), "a line")
        files = [run_logs.object_name("r1"), own, other_run, deployed]
        assert await _record(bus, 2, "r1", files) == []
        assert await _record(bus, 2, "r2", [run_logs.object_name("r2")]) == []
        assert await _record(bus, 2, "r3", [run_logs.object_name("r3")]) == ["r1"]

        pruned = await bus.last_event(subjects.run_event("p", "r1", "pruned"))
        assert pruned.objects == [run_logs.object_name("r1"), own]
        assert pruned.kept == [other_run, deployed]
        assert not await _exists(store, own) and not await _exists(store, "log/r1")
        assert await _exists(store, other_run) and await _exists(store, deployed)
        lines = await bus.js.stream_info("DBT_LOGS", subjects_filter=subjects.run_log("r1"))
        assert not (lines.state.subjects or {}).get(subjects.run_log("r1"))
        assert await _index(bus) == ["r2", "r3"]

        # The run whose state the environment publishes keeps its files however old.
        await bus.publish(
            ev.StatePublished(
                project="p", environment=ENV, run_id="r2", version="sha256:" + "0" * 64,
                manifest_digest=own, manifest_size=1,
            )
        )  # fmt: skip
        assert await _record(bus, 2, "r4", []) == []
        assert await _record(bus, 2, "r5", []) == ["r3"]
        assert await _index(bus) == ["r2", "r4", "r5"]
        assert await _exists(store, "log/r2")
    finally:
        await bus.close()


async def test_replicas_recording_at_once_lose_no_entry(nats_url):
    buses = [await connect(nats_url, f"replica-{i}") for i in range(3)]
    try:
        runs = [f"c{i}" for i in range(12)]
        pruned = await asyncio.gather(
            *(_record(buses[i % 3], 3, run_id, []) for i, run_id in enumerate(runs))
        )
        gone = {r for found in pruned for r in found}  # replicas may prune a run twice
        kept = await _index(buses[0])
        assert len(kept) == 3 and not set(kept) & gone and set(kept) | gone == set(runs)
        # ...but the log says so once: run.pruned has a deterministic id.
        info = await buses[0].js.stream_info("DBT_EVENTS", subjects_filter="dbt.evt.run.>")
        assert sorted(info.state.subjects) == sorted(
            subjects.run_event("p", r, "pruned") for r in gone
        )
        assert set(info.state.subjects.values()) == {1}
    finally:
        for bus in buses:
            await bus.close()


@pytest.mark.dbt
@pytest.mark.parametrize(
    ("keep", "pruned"),
    [
        (2, 2),
        pytest.param(
            30,
            5,
            marks=[
                pytest.mark.skipif(not FULL, reason="set JETDBT_RETENTION_FULL=1"),
                pytest.mark.timeout(3600),  # 36 dbt builds
            ],
        ),
    ],
)
async def test_old_runs_lose_their_files_and_keep_their_results(settings, keep, pruned):
    stack = await Stack(msgspec.structs.replace(settings, run_retention=keep)).start()
    try:
        await deploy_and_wait(stack.bus, "examples/jaffle_shop", "kept")
        # The first run publishes the environment's state; the others select one model,
        # so they publish none and the state stays the oldest run's.
        commands = [BuildCommand()] + [BuildCommand(select=["stg_customers"])] * (keep + pruned)
        finals = []
        for i, command in enumerate(commands):
            final = await client.run(
                stack.bus, "kept", RunCommand(command=command, run_id=f"kept{i}")
            )
            assert final.result.status == "passed", final.result.error
            finals.append(final)
        state = await stack.bus.last_event(subjects.state_pattern("kept"))
        assert state.run_id == "kept0"
        store = await stack.bus.js.object_store("DBT_BLOBS")
        gone = [f"kept{i}" for i in range(1, pruned + 1)]
        for run_id in gone:
            event = await stack.bus.last_event(subjects.run_event("kept", run_id, "pruned"))
            assert isinstance(event, ev.RunPruned), run_id
            # Its log, the run_results a retry would resume, and dbt's manifest and run_results.
            assert run_logs.object_name(run_id) in event.objects and len(event.objects) == 4
            assert not [o for o in event.objects if await _exists(store, o)]
            status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}/logs")
            assert status == 410 and "removed by retention" in body["error"]

            async def projected(run_id=run_id):
                status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
                return body if status == 200 and body["files_pruned_at"] else None

            record = await wait_for(projected)
            assert record["status"] == "passed" and record["totals"]["passed"] >= 1
            assert record["nodes"] and record["log_object"] == run_logs.object_name(run_id)
            assert set(record["artifacts"].values()) <= set(event.objects)
            status, body = await get_json(
                f"{stack.api_url}/v1/runs/{run_id}/artifacts/manifest.json"
            )
            assert status == 404 and "removed by retention" in body["error"]
        for final in [finals[0], *finals[pruned + 1 :]]:
            assert await _exists(store, run_logs.object_name(final.run_id)), final.run_id
            assert (
                await stack.bus.last_event(subjects.run_event("kept", final.run_id, "pruned"))
                is None
            )
        assert await _exists(store, state.manifest_digest)
        status, body = await get_json(f"{stack.api_url}/v1/runs/kept0/logs?limit=1")
        assert status == 200 and body["lines"]
    finally:
        await stack.stop()

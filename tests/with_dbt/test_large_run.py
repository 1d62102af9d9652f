"""A run too large for one message ends, and says so everywhere: its nodes travel as a blob
that RunFinished names, and a result that cannot be published still ends the run.

The nats-server here takes messages of at most MAX_PAYLOAD bytes (its default is 1 MiB),
so a generated project of a few hundred one-line models is a run whose RunFinished, with
every node inline as v1 carried them, would be refused by the server: the 5,000-model
case of issue 28 at a size a test can build.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import msgspec
import pyarrow.parquet as pq
import pytest
from jetdbt.projections.deploys.fold import DeploysFold
from jetdbt.projections.replay import replay
from jetdbt.services.cli import client
from jetdbt.services.runner.after import results
from jetdbt.services.stack.embedded import NatsServer
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import EVENTS
from nats.js.api import ConsumerConfig, DeliverPolicy

from tests.support.helpers import deploy_and_wait, get_json, jetdbt
from tests.support.paths import EXAMPLE
from tests.support.projection_pools import scratch_pool
from tests.support.recorded_log import settled

# Above the object store's 128 KiB chunks (a blob is stored in them), far below 1 MiB.
MAX_PAYLOAD = 160 * 1024
MODELS = 400  # about 455 bytes a node inline: some 180 KiB, over MAX_PAYLOAD by a tenth


@pytest.fixture
def nats_server(tmp_path):
    """The suite's nats-server, with a small payload limit."""
    conf = tmp_path / "nats.conf"
    conf.write_text(f"max_payload: {MAX_PAYLOAD}\n")
    server = NatsServer(tmp_path / "nats", config=conf).start()
    yield server
    server.stop()


def _project(dest: Path, models: int) -> Path:
    """`models` one-line views, each of the later ones reading an earlier one."""
    (dest / "models").mkdir(parents=True)
    (dest / "dbt_project.yml").write_text(
        "name: wide\nversion: '1.0.0'\nconfig-version: 2\nprofile: wide\n"
        "models:\n  wide:\n    +materialized: view\n"
    )
    for i in range(models):
        body = "select 1 as id" if i < 20 else f"select id from {{{{ ref('m_{i % 20:04d}') }}}}"
        (dest / "models" / f"m_{i:04d}.sql").write_text(body + "\n")
    return dest


async def _events(stack) -> list[tuple[str, bytes]]:
    """Every message of DBT_EVENTS as stored: its subject and its bytes."""
    js = stack.bus.js
    remaining = (await js.stream_info(EVENTS)).state.messages
    sub = await js.pull_subscribe(
        ">", stream=EVENTS, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    found = []
    while remaining > 0:
        msgs = await sub.fetch(min(remaining, 500), timeout=5)
        found += [(m.subject, m.data) for m in msgs]
        remaining -= len(msgs)
    await sub.unsubscribe()
    return found


@pytest.mark.dbt
async def test_a_run_too_large_for_one_message_ends_passed_with_every_node_everywhere(
    stack, tmp_path
):
    await deploy_and_wait(stack.bus, _project(tmp_path / "wide", MODELS), "wide")

    done = await jetdbt(stack, "run", "wide", "--json", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["status"] == "passed" and len(result["nodes"]) == MODELS
    assert result["totals"]["passed"] == MODELS
    run_id = result["run_id"]

    # What v1 would have published: every node inline, over what the server takes.
    finished = await stack.bus.last_event(subjects.run_event("wide", run_id, "finished"))
    whole = await event_blobs.resolved(stack.bus, finished)
    inline = ev.RunFinishedV1(
        project="wide", run_id=run_id, attempt=whole.attempt, result=whole.result
    )
    assert len(msgspec.json.encode(inline)) > MAX_PAYLOAD
    assert finished.result.nodes == [] and finished.nodes_blob.count == MODELS
    assert {n.unique_id for n in whole.result.nodes} == {n["unique_id"] for n in result["nodes"]}
    # Every event stored is bounded: none comes near the server's limit.
    stored = await _events(stack)
    assert max(len(data) for _, data in stored) < MAX_PAYLOAD // 2

    await settled(stack)
    status, run = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
    assert status == 200 and run["status"] == "passed" and run["finished_at"]
    assert len(run["nodes"]) == MODELS and {n["outcome"] for n in run["nodes"]} == {"passed"}
    assert (run["nodes_started"], run["nodes_finished"]) == (MODELS, MODELS)

    audited = await jetdbt(stack, "audit", "run", run_id, "--json")
    assert audited.returncode == 0, audited.stderr
    history = json.loads(audited.stdout)
    assert history["status"] == "passed" and len(history["nodes"]) == MODELS

    out = tmp_path / "log.parquet"
    exported = await jetdbt(stack, "audit", "export", "--project", "wide", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    rows = pq.read_table(out).to_pylist()
    [end] = [r for r in rows if r["event_type"] == "run.finished.v2"]
    assert len(json.loads(end["nodes"])) == MODELS

    report = await replay(stack.bus, stack.database_url, stack.settings.schema)
    assert {t.table: t.live_rows for t in report.tables}["run_nodes"] == MODELS
    assert report.differences == 0, [d for t in report.tables for d in t.shown]


@pytest.mark.dbt
async def test_a_result_that_cannot_be_published_ends_the_run_failed_and_never_builds_again(
    stack,
):
    """The object store refuses every new object (its stream is full), so neither the
    retry state's run results nor the kept log can be stored: the run still ends, failed,
    naming why, in one small event; the command is settled, not delivered again."""
    await deploy_and_wait(stack.bus, EXAMPLE, "jaffle_shop")
    js = stack.bus.js
    blobs = await js.stream_info("OBJ_DBT_BLOBS")
    full = dataclasses.replace(blobs.config, max_bytes=blobs.state.bytes)
    await js.update_stream(full)

    final = await asyncio.wait_for(
        client.run(stack.bus, "jaffle_shop", RunCommand(command=BuildCommand())), 600
    )
    assert isinstance(final, ev.RunFinished)
    r = final.result
    assert r.status == "failed" and r.nodes == [] and final.nodes_blob is None
    assert r.error.startswith("the run's result could not be published (")
    assert "dbt's own outcome was 'passed'" in r.error
    assert sum(r.totals.values()) == 23
    assert len(ev.encode(final)) < 16 * 1024

    await settled(stack)
    status, run = await get_json(f"{stack.api_url}/v1/runs/{final.run_id}")
    assert status == 200 and run["status"] == "failed" and run["finished_at"]
    assert run["result"]["error"] == r.error
    assert len(run["nodes"]) == 23  # each node's own event said how it went
    # A redelivered command would start attempt 2 within seconds: it never comes.
    await asyncio.sleep(8)
    started = [
        ev.decode(data)
        for subject, data in await _events(stack)
        if subject == subjects.run_event("jaffle_shop", final.run_id, "started")
    ]
    assert [s.attempt for s in started] == [1]


def test_a_node_message_of_a_megabyte_is_cut_and_its_event_stays_small():
    """A database error may quote a whole query: the node's message keeps its head and its
    tail, and its NodeFinished is far below one event's limit."""
    message = "relation does not exist: " + "x" * 1_000_000 + " LINE 1"
    record = {
        "info": {"name": "NodeFinished"},
        "data": {
            "node_info": {"unique_id": "model.p.m", "resource_type": "model", "node_name": "m"},
            "run_result": {"status": "error", "message": message},
        },
    }
    node = results.node_finished(record)
    assert node.message.startswith("relation does not exist") and node.message.endswith("LINE 1")
    assert len(node.message) < results.MESSAGE_LIMIT + 100
    event = ev.NodeFinished(project="p", run_id="r", attempt=1, node=node)
    assert len(ev.encode(event)) < 32 * 1024


def test_an_event_over_the_limit_is_never_sent_and_the_error_names_it():
    node = ev.NodeResult(unique_id="model.p.m", status="error", outcome="failed")
    result = ev.RunResult(
        status="failed",
        engine="dbt-core-1x",
        engine_version="1.10.4",
        mode="build",
        totals={"failed": 1},
        nodes=[node] * 5000,
        exit_code=1,
    )
    with pytest.raises(ev.EventTooLarge, match=r"event run:p:r:1:finished is \d+ bytes"):
        ev.encode(ev.RunFinished(project="p", run_id="r", attempt=1, result=result))


async def test_a_version_of_thirty_thousand_files_names_them_in_a_blob_every_reader_reads(
    nats_url, pg_url
):
    """Deployed lists a version's files: past INLINE_BYTES they travel as a blob, and the
    deploys projection stores the whole list."""
    bus = await connect(nats_url, "test")
    files = [f"models/area_{i % 40:02d}/model_{i:05d}.sql" for i in range(30_000)]
    try:
        kept, blob = await event_blobs.split(bus, files)
        assert kept == [] and blob.count == 30_000 and blob.size > MAX_PAYLOAD
        deployed = ev.Deployed(
            project="p",
            deploy_id="d1",
            version="sha256:" + "a" * 64,
            bundle_size=1,
            manifest_digest="sha256:" + "b" * 64,
            manifest_size=1,
            engine="dbt-core-1x",
            engine_version="1.10.4",
            adapter="duckdb",
            adapter_version="1.9.3",
            files=kept,
            files_blob=blob,
        )
        assert len(ev.encode(deployed)) < 2048
        await bus.publish(deployed)
        stored = await bus.last_event(deployed.subject())
        assert (await event_blobs.resolved(bus, stored)).files == files
        async with scratch_pool(pg_url) as pool, pool.acquire() as conn:
            await DeploysFold(bus).apply(conn, stored, 1)
            assert await conn.fetchval("SELECT files FROM deploys WHERE deploy_id = 'd1'") == files
    finally:
        await bus.close()

"""The server gate and the stream contract: refuse unfit servers, ensure idempotently."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time

import pytest
import structlog
from jetdbt.services.stack.embedded import free_port, nats_binary
from jetdbt.shared.bus import contract, subjects
from jetdbt.shared.bus.connection import ServerRefused, check_server, connect
from jetdbt.shared.bus.events import RunRequested
from jetdbt.shared.bus.streams import COMMANDS, EVENTS, SCHEDULES_STREAM
from jetdbt.shared.process import logging as jlog
from nats.js import api
from nats.js.errors import APIError

from tests.support.chaos.harness import start_cluster
from tests.support.helpers import JETDBT

SYSTEM_NATS = ("127.0.0.1", 4222)
DAY = 86400


@pytest.mark.parametrize("version", ["2.9.10", "2.2.0", "1.4.1"])
def test_check_server_refuses_a_server_older_than_2_10(version):
    with pytest.raises(ServerRefused, match=rf"version {version}; jetdbt requires NATS >= 2\.10"):
        check_server(version, "nats://example:4222")


@pytest.mark.parametrize("version", ["2.10.0", "2.15.1", "2.11.0-RC.2", "3.0.0"])
def test_check_server_accepts_2_10_and_later(version):
    check_server(version, "nats://example:4222")


def test_check_server_refuses_an_unreadable_version():
    with pytest.raises(ServerRefused, match="unreadable version 'dev'"):
        check_server("dev", "nats://example:4222")


def _system_nats_version() -> str | None:
    """The version a server on 127.0.0.1:4222 announces in its INFO line, if one listens."""
    try:
        with socket.create_connection(SYSTEM_NATS, timeout=1) as sock:
            sock.settimeout(2)
            line = sock.makefile("rb").readline()
    except OSError:
        return None
    if not line.startswith(b"INFO "):
        return None
    return json.loads(line[5:])["version"]


async def test_connect_refuses_an_old_server_naming_its_version():
    version = _system_nats_version()
    if version is None:
        pytest.skip("no NATS server listens on 127.0.0.1:4222")
    major, minor = (int(p) for p in version.split("-")[0].split(".")[:2])
    if (major, minor) >= (2, 10):
        pytest.skip(f"the server on 127.0.0.1:4222 is {version}, not an old one")
    with pytest.raises(ServerRefused, match=rf"is version {version};"):
        await connect("nats://127.0.0.1:4222", "t", ensure=False)


@pytest.fixture
def nats_without_jetstream(tmp_path):
    port = free_port()
    with open(tmp_path / "nats-server.log", "wb") as log:
        proc = subprocess.Popen(
            [nats_binary(), "-a", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "nats-server down"
                time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("forever", [False, True])
async def test_connect_refuses_a_server_without_jetstream(nats_without_jetstream, forever):
    """A service (`forever`) waits out a cluster that does not answer yet, never a server
    that answers it has no JetStream: it is refused at once too."""
    began = time.monotonic()
    with pytest.raises(ServerRefused, match="has no JetStream: start it with -js"):
        await connect(nats_without_jetstream, "t", forever=forever)
    assert time.monotonic() - began < 5


@pytest.fixture
async def js(nats_url):
    bus = await connect(nats_url, "t", ensure=False)
    yield bus.js
    await bus.close()


async def _stream_names(js) -> set[str]:
    return {info.config.name for info in await js.streams_info()}


async def test_ensure_creates_the_contract_and_is_idempotent(js):
    spec = contract.load()
    assert await _stream_names(js) == set()
    await contract.ensure(js, spec)
    assert await _stream_names(js) == {
        COMMANDS,
        EVENTS,
        SCHEDULES_STREAM,  # jobs' message schedules and their fires, runner-written
        "DBT_LOGS",
        "DBT_INTAKE",  # other systems' declared writes, before a runner checks them
        "OBJ_DBT_BLOBS",  # the object store
        "KV_DBT_LEASES",  # the key-value bucket
        "KV_DBT_PROJECTORS",  # which projector process folds, and the standbys
        "KV_DBT_RETENTION",  # which finished runs keep their files
        "KV_DBT_IDENTITY",  # principals and token hashes, operator-written
        "KV_DBT_HOOK_SECRETS",  # webhooks and their secrets, the notifier's alone
    }
    # The commands runners may hold, waiting ones included; runs are capped by admission.
    assert (await js.consumer_info(COMMANDS, "runners")).config.max_ack_pending == 256
    await js.object_store("DBT_BLOBS")
    leases = await js.key_value("DBT_LEASES")
    await leases.put("team-a", b"1")

    event = RunRequested(project="p", run_id="r1", command={"label": "build"})
    ack = await js.publish(event.subject(), b"{}", headers={"Nats-Msg-Id": event.event_id()})
    created = (await js.stream_info(EVENTS)).created

    await contract.ensure(js, spec)  # a second service starting: nothing is recreated
    info = await js.stream_info(EVENTS)
    assert info.created == created and info.state.last_seq == ack.seq
    assert (await leases.get("team-a")).value == b"1"
    # The duplicate window survived too: the same id is still dropped.
    again = await js.publish(event.subject(), b"{}", headers={"Nats-Msg-Id": event.event_id()})
    assert again.duplicate


def test_schedules_fire_onto_what_the_commands_stream_sources_as_run_commands():
    """The one spelling of a fire's subject (jetdbt.shared.bus.subjects) is what streams.yaml
    sources:
    a fire of alice's schedule in `p` arrives as alice's run command in `p`."""
    spec = contract.load()
    (source,) = spec.streams[COMMANDS].sources
    assert source.stream == SCHEDULES_STREAM
    assert source.subjects_from == f"{subjects.FIRES}.>"
    fire = subjects.schedule_target("p", "alice")
    assert fire.replace(source.subjects_from[:-1], source.subjects_to[:-1], 1) == (
        subjects.command("run", "p", "alice")
    )
    schedules = spec.streams[SCHEDULES_STREAM]
    assert schedules.allow_msg_schedules and not spec.streams[COMMANDS].allow_msg_schedules
    assert schedules.max_age_days == 0  # a definition never ages out


async def test_a_schedule_planted_among_commands_is_refused_by_the_server(js):
    """Commands carry whatever headers a client sets: the commands stream holds no
    schedule, and the headers only the server sets on a fire are refused from a client."""
    await contract.ensure(js, contract.load())
    run = subjects.command("run", "p", "alice")
    planted = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": run}
    forged = {"Nats-Scheduler": subjects.schedule_definition("p", "nightly")}
    sourced = {"Nats-Stream-Source": f"{SCHEDULES_STREAM} 1 dbt.fire.> dbt.cmd.> {run} x"}
    for headers in (planted, forged, sourced):
        with pytest.raises(APIError):
            await js.publish(run, b"{}", headers=headers)
    assert (await js.stream_info(COMMANDS)).state.messages == 0


async def test_the_event_stream_denies_delete_and_purge(js):
    await contract.ensure(js, contract.load())
    config = (await js.stream_info(EVENTS)).config
    assert config.deny_delete and config.deny_purge
    assert config.max_age == 0 and config.storage == api.StorageType.FILE
    ack = await js.publish("dbt.evt.run.p.r1.requested", b"{}")
    with pytest.raises(APIError):
        await js.purge_stream(EVENTS)
    with pytest.raises(APIError):
        await js.delete_msg(EVENTS, ack.seq)
    assert (await js.stream_info(EVENTS)).state.messages == 1


async def test_an_incompatible_stream_is_refused_naming_the_field(nats_url, js):
    await js.add_stream(
        api.StreamConfig(name="DBT_LOGS", subjects=["dbt.log.>"], storage=api.StorageType.MEMORY)
    )
    with pytest.raises(contract.IncompatibleContract) as refused:
        await contract.ensure(js, contract.load())
    assert "DBT_LOGS" in str(refused.value)
    assert "'storage' is 'memory' on the server and 'file' in streams.yaml" in str(refused.value)
    # A service connecting to this server refuses to start for the same reason.
    with pytest.raises(contract.IncompatibleContract, match="DBT_LOGS"):
        await connect(nats_url, "t")
    assert (await js.stream_info("DBT_LOGS")).config.storage == api.StorageType.MEMORY


async def test_a_deny_flag_on_the_server_cannot_be_switched_off(js):
    await js.add_stream(api.StreamConfig(name="DBT_LOGS", subjects=["dbt.log.>"], deny_purge=True))
    with pytest.raises(contract.IncompatibleContract, match="DBT_LOGS: field 'deny_purge' is on"):
        await contract.ensure(js, contract.load())


async def test_a_compatible_change_is_applied(js):
    await js.add_stream(
        api.StreamConfig(name="DBT_LOGS", subjects=["dbt.log.>"], max_age=DAY, description="old")
    )
    await js.publish("dbt.log.r1", b"a line")
    await contract.ensure(js, contract.load())
    info = await js.stream_info("DBT_LOGS")
    assert info.config.max_age == 7 * DAY
    assert info.config.max_bytes == 2 * 1024**3  # a run's log is bounded in bytes too
    assert info.config.description == "human-readable log lines of a run"
    assert info.state.messages == 1  # updated in place, not recreated


async def test_a_service_with_other_settings_does_not_rewrite_the_runners_consumer(js, nats_url):
    """The operator's ack wait stands: an API started without RUN_ACK_WAIT_SECONDS once
    turned 8 s into 60 s for every runner, and one run executed four times at once."""
    spec = contract.load()
    await contract.ensure(js, spec, {"runners": {"ack_wait": 8, "max_ack_pending": 2}})
    other = await connect(nats_url, "api-without-settings")  # ensures with the defaults
    await other.close()
    await contract.ensure(js, spec, {"runners": {"ack_wait": 90}})
    config = (await js.consumer_info(COMMANDS, "runners")).config
    assert (config.ack_wait, config.max_ack_pending) == (8, 2)


async def test_a_runner_heartbeats_at_the_live_ack_wait(settings):
    """A runner configured for 60 s under a consumer created with 8 s beats every 2 s."""
    from jetdbt.services.runner.context import RunnerContext
    from jetdbt.services.runner.worker import Runner

    bus = await connect(settings.nats_url, "t", consumer_overrides={"runners": {"ack_wait": 8}})
    try:
        runner = Runner(RunnerContext(bus=bus, settings=settings))
        assert runner.ack_wait == 60
        stop = asyncio.Event()
        serving = asyncio.create_task(runner.run(stop))
        async with asyncio.timeout(10):
            while runner.ack_wait != 8:
                await asyncio.sleep(0.05)
        stop.set()
        await serving
    finally:
        await bus.close()


def _contract_apply(nats_url: str, home, *args: str) -> subprocess.CompletedProcess:
    """`jetdbt contract apply` as an operator runs it, against the test's server."""
    env = {**os.environ, "NATS_URL": nats_url, "JETDBT_HOME": str(home)}
    return subprocess.run(
        [JETDBT, "contract", "apply", *args], env=env, capture_output=True, text=True, timeout=60
    )


async def test_contract_apply_takes_the_replica_count(js, nats_url, tmp_path):
    done = await asyncio.to_thread(_contract_apply, nats_url, tmp_path, "--replicas", "1")
    assert done.returncode == 0, done.stderr
    assert (await js.stream_info(EVENTS)).config.num_replicas == 1
    assert (await js.stream_info("KV_DBT_LEASES")).config.num_replicas == 1


async def test_a_single_server_is_refused_three_replicas_naming_the_setting(js, nats_url, tmp_path):
    done = await asyncio.to_thread(_contract_apply, nats_url, tmp_path, "--replicas", "3")
    assert done.returncode == 2, done.stderr
    assert "jetdbt: JETDBT_STREAM_REPLICAS (--replicas) is 3" in done.stderr
    assert "not part of a cluster" in done.stderr and "Traceback" not in done.stderr
    assert await _stream_names(js) == set()  # nothing made at one replica behind its back


async def test_a_service_on_streams_under_its_replica_count_says_so_at_start(
    js, nats_url, monkeypatch
):
    await contract.ensure(js, contract.load())
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(contract, "_log", jlog.get("contract"))  # bound inside the capture
        bus = await connect(nats_url, "a service", apply=False, replicas=3)
        await bus.close()
    (warning,) = [line for line in logs if line["event"] == "streams_under_replicated"]
    assert warning["log_level"] == "warning" and warning["configured"] == 3
    assert warning["streams"][EVENTS] == 1 and warning["streams"]["KV_DBT_LEASES"] == 1
    assert warning["setting"] == "JETDBT_STREAM_REPLICAS"


async def test_a_cluster_applied_at_three_replicas_holds_every_stream_and_bucket_at_three(
    tmp_path,
):
    """What `jetdbt contract apply --replicas 3` makes of a three-node cluster (the cluster
    harness applies the contract so), buckets' backing streams included."""
    cluster = await start_cluster(tmp_path / "cluster")
    try:
        bus = await connect(cluster.url, "t", ensure=False)
        try:
            held = {i.config.name: i.config.num_replicas for i in await bus.js.streams_info()}
        finally:
            await bus.close()
    finally:
        await asyncio.to_thread(cluster.stop)
    spec = contract.load()
    assert len(held) == len(spec.streams) + len(spec.key_value) + len(spec.object_stores)
    assert set(held.values()) == {3}, held

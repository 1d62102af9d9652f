"""jetdbt on a three-node JetStream cluster: the contract keeps R3 streams and buckets, the
example builds, and a build whose event stream loses its leader mid-run passes whole."""

from __future__ import annotations

import asyncio

import pytest

from services import client
from services.cluster import NatsCluster
from shared import events as ev
from shared.commands import BuildCommand, RunCommand
from tests.chaos.harness import Tally, World, gate_project, start_cluster
from tests.chaos.outages import leader_outage
from tests.conftest import EXAMPLE
from tests.helpers import jetdbt

pytestmark = pytest.mark.dbt

REPLICATED = (
    "DBT_EVENTS",
    "DBT_COMMANDS",
    "DBT_SCHEDULES",
    "DBT_LOGS",
    "KV_DBT_LEASES",
    "OBJ_DBT_BLOBS",
)


@pytest.fixture
async def cluster(tmp_path):
    started = await start_cluster(tmp_path / "cluster")
    yield started
    await asyncio.to_thread(started.stop)


@pytest.fixture
def nats_url(cluster: NatsCluster) -> str:
    """The conftest's settings and stack, on the cluster: every node's URL, comma-separated."""
    return cluster.url


async def test_the_contract_keeps_r3_and_the_example_builds(stack):
    for name in REPLICATED:  # the stack ensured the contract after the cluster was set up
        info = await stack.bus.js.stream_info(name)
        assert info.config.num_replicas == 3, name
        assert info.cluster.leader and len(info.cluster.replicas) == 2, name
    _, deployed = await client.deploy(stack.bus, EXAMPLE, "jaffle_shop")
    assert isinstance(deployed, ev.Deployed), deployed
    final = await client.run(stack.bus, "jaffle_shop", RunCommand(command=BuildCommand()))
    assert final.result.status == "passed", final.result.error
    assert len(final.result.nodes) == 23


async def test_the_event_stream_leader_killed_mid_run(stack, cluster, tmp_path):
    release = tmp_path / "release"
    w = World(
        folder=tmp_path,
        settings=stack.settings,
        stack=stack,
        release=release,
        project_dir=gate_project(tmp_path / "project", release),
        cluster=cluster,
    )
    await w.deploy()
    run_id = await w.start(Tally("leader"), "leader1")
    assert await w.gate_running(run_id), "the gate model should hold the build"
    leader = await cluster.stream_leader(stack.bus.js)
    await leader_outage(w)  # SIGKILL the leader, open the gate, start the node again
    assert cluster.nodes[leader].running

    final = await w.finished(run_id)
    assert final is not None and final.result.status == "passed", final
    assert {n.unique_id for n in final.result.nodes} == w.expected
    body = await w.projected(run_id, "passed")
    assert body is not None, "the API should show the run passed"
    assert {n["unique_id"] for n in body["nodes"]} == w.expected
    assert not [n["unique_id"] for n in body["nodes"] if n["status"] == "running"]
    replayed = await jetdbt(stack, "replay", "--all")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "\n0 differences" in replayed.stdout

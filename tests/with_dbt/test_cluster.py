"""jetdbt on a three-node JetStream cluster: the contract keeps R3 streams and buckets, the
example builds, a build whose event stream loses its leader mid-run passes whole, and a
schedule whose stream loses its leader makes one run per fire."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.chaos.harness import Tally, World, gate_project, start_cluster
from tests.support.chaos.outages import leader_outage
from tests.support.cluster import NatsCluster
from tests.support.helpers import deploy_and_wait, jetdbt, wait_for
from tests.support.paths import EXAMPLE
from tests.support.schedule_fires import (
    at,
    fires,
    next_due,
    one_run_per_fire,
    paused,
    scheduled,
    source_seq,
    sourced,
)

pytestmark = pytest.mark.dbt

REPLICATED = (
    "DBT_EVENTS",
    "DBT_COMMANDS",
    "DBT_SCHEDULES",
    "DBT_LOGS",
    "KV_DBT_LEASES",
    "OBJ_DBT_BLOBS",
)
EVERY = 2  # seconds between a schedule's fires
# A raft election after a leader's crash takes 4 to 9 s (nats-server's election timeouts).
ELECTION = 9


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
    await deploy_and_wait(stack.bus, EXAMPLE, "jaffle_shop")
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


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["restarted", "killed"])
async def test_a_schedule_across_its_streams_leader_stopped(stack, cluster, sig):
    """The node leading DBT_SCHEDULES fires the schedules it holds. Restarted (SIGTERM), it
    hands leadership over and no fire is late or lost. Killed (SIGKILL), the other two
    elect a new leader, which fires once for the due times that fell while the stream had
    none (a crash coalesces them), then on the cadence. Either way no due time fires twice,
    each fire is one run, and fires go on after the node is back."""
    await scheduled(stack.bus, "jaffle_shop", "ops", EVERY)
    js = stack.bus.js

    async def fired(since: float, count: int) -> bool:
        return len([f for f in await fires(js, "jaffle_shop") if at(f) > since]) >= count

    await wait_for(lambda: fired(0, 2), timeout=60)
    leader = await cluster.stream_leader(js, "DBT_SCHEDULES")
    killed_at = time.time()
    await asyncio.to_thread(cluster.stop_node, leader, sig)
    await asyncio.sleep(3)
    await asyncio.to_thread(cluster.start_node, leader)
    back_at = time.time()
    await wait_for(lambda: fired(back_at, 3), timeout=60)
    found = await paused(stack.bus, "jaffle_shop", "ops", EVERY)

    dues = [next_due(f) for f in found]
    assert dues == sorted(set(dues)), "a due time fired twice"
    gaps = [(at(a), at(b) - at(a)) for a, b in zip(found, found[1:], strict=False)]
    late = [(start, gap) for start, gap in gaps if gap > EVERY + 1]
    await one_run_per_fire(js, "ops", found)
    made = {f.metadata.sequence.stream: at(f) for f in found}
    lag = max(at(c) - made[source_seq(c)] for c in await sourced(js, "jaffle_shop"))
    print(f"{sig.name}: gaps {[round(g, 2) for _, g in gaps]}, longest sourcing {lag:.1f} s")
    if sig == signal.SIGTERM:
        assert not late, f"a restart lost or delayed fires: {late}"
    # One late fire, the one a new leader makes for the leaderless window; no burst after it.
    assert len(late) <= 1, late
    assert all(start < killed_at and gap < ELECTION + EVERY + 2 for start, gap in late), late
    assert min(gap for _, gap in gaps) > 1, gaps

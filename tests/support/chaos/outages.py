"""Servers taken away mid-run and brought back: the embedded NATS, the cluster's stream
leader, Postgres. The build goes on (or waits) and every run ends as if nothing happened."""

from __future__ import annotations

import asyncio
import functools
import time

from pgserver import pg_ctl
from pgserver.utils import PostmasterInfo

from tests.support.chaos.harness import Tally, World, gated_runs, open_world

__all__ = [
    "nats_restarts",
    "leader_kills",
    "postgres_restarts",
    "nats_outage",
    "leader_outage",
    "postgres_outage",
    "restart_postgres",
]

NATS_DOWN = 5.0  # seconds NATS is away: longer than a publish's own timeout
LEADER_DOWN = 3.0
POSTGRES_DOWN = 3.0
FOLDING = 0.5  # seconds after the gate opens: the build's last events are being projected


async def nats_outage(w: World, run_id: str = "") -> None:
    """Stop the world's nats-server while dbt finishes the held build, then start it."""
    await asyncio.to_thread(w.nats.stop)
    w.release.touch()
    await asyncio.sleep(NATS_DOWN)
    await asyncio.to_thread(w.nats.start)


async def leader_outage(w: World, run_id: str = "") -> None:
    """SIGKILL the node leading DBT_EVENTS; the build goes on while the other two elect
    a leader; then start the node again and wait until it has caught up."""
    leader = await w.cluster.stream_leader(w.stack.bus.js)
    await asyncio.to_thread(w.cluster.stop_node, leader)
    w.release.touch()
    await asyncio.sleep(LEADER_DOWN)
    await asyncio.to_thread(w.cluster.start_node, leader)


def restart_postgres(server, down: float = POSTGRES_DOWN) -> None:
    """Stop pgserver's Postgres the hard way (no checkpoint, clients cut), wait, start it
    again with the options it ran with (pg_ctl keeps them in postmaster.opts)."""
    pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
    time.sleep(down)
    pg_ctl(["-w", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user)
    # pgserver stops the process it last saw at cleanup: show it the new one.
    server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)


async def postgres_outage(w: World, server, run_id: str = "") -> None:
    """Let the held build finish and crash Postgres while its last events are folded."""
    w.release.touch()
    await asyncio.sleep(FOLDING)
    await asyncio.to_thread(restart_postgres, server)


async def nats_restarts(tally: Tally, root, pg_url: str, count: int) -> None:
    async with open_world(root, "nats_restart", pg_url) as w:
        await w.deploy()
        await gated_runs(w, tally, count, "nats", functools.partial(nats_outage, w))


async def leader_kills(tally: Tally, root, pg_url: str, count: int) -> None:
    async with open_world(root, "leader_kill", pg_url, cluster=True) as w:
        await w.deploy()
        await gated_runs(w, tally, count, "leader", functools.partial(leader_outage, w))


async def postgres_restarts(tally: Tally, root, pg_url: str, pg_server, count: int) -> None:
    async with open_world(root, "postgres_restart", pg_url) as w:
        await w.deploy()
        outage = functools.partial(postgres_outage, w, pg_server)
        await gated_runs(w, tally, count, "pg", outage)

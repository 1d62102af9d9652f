"""Runners as separate hosts: three nats-servers, three runner processes, each in a network
namespace of its own (its own address, JETDBT_HOME and environment cache; nothing shared on
disk but the warehouse, a Postgres reached over the private network), two projector
processes and the API in this process. With one build held in each runner
(MAX_RUNS_PER_RUNNER=1 puts one on each), three faults at once: a runner SIGKILLed, a
runner's link cut (a partition, not a death) and the node leading the event stream
SIGKILLed; then, while the builds taken over run, the active projector SIGKILLed. Every run
ends once, passed; the cut-off runner's dbt stops at its lease's fence and, its link back,
it publishes nothing of its old attempt; the standby projector takes over and the lag is 0
within a second; replay finds 0 differences.

The gate is the warehouse's: each project's `gate` model waits in Postgres for a row in a
release table, so a runner's dbt is held by what it shares with the others, not by a file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
import yaml
from jetdbt.projections import lag
from jetdbt.services.audit import run_history as audit
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import contract, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.process.config import load

from tests.support.chaos.harness import ORPHAN_RESOLUTION, start_cluster, stop_process
from tests.support.events_seen import Events
from tests.support.forward import Forward
from tests.support.helpers import deploy_and_wait, get_json, jetdbt, pg_parts, wait_for
from tests.support.netns import Hosts
from tests.support.processes import ACK_WAIT, serve, sweep_after_kill, working_in

pytestmark = [pytest.mark.dbt, pytest.mark.timeout(300)]

PROJECTS = ("hosta", "hostb", "hostc")
PROJECTOR_LEASE = 1.0  # JETDBT_PROJECTOR_LEASE_SECONDS: a standby takes over in about a second
FINISHED, STARTED = (e.__struct_config__.tag for e in (ev.RunFinished, ev.RunStarted))
# Waits in the warehouse for a table the test creates; its own deadline ends a forgotten one.
# A query each turn, not to_regclass: a name looked up from inside one statement may be
# answered from the backend's cache, which a table created meanwhile need not refresh.
GATE = """{{{{ config(materialized='table', pre_hook="do $$ declare until_at timestamptz :=
clock_timestamp() + interval '120 seconds'; begin while not exists (select from {table}) and
clock_timestamp() < until_at loop perform pg_sleep(0.1); end loop; end $$") }}}}
select * from {{{{ ref('{orders}') }}}}
"""


def gate_project(folder: Path, name: str, schema: str) -> Path:
    """`<name>_orders` and `<name>_gate` in `schema`, its own (one build per environment: a
    schema shared by the three would let one build at a time); the gate waits for a row in
    the table `<schema>.release`."""
    models = folder / "models"
    models.mkdir(parents=True)
    (folder / "dbt_project.yml").write_text(
        f'name: {name}\nversion: "1.0.0"\nconfig-version: 2\nprofile: {name}\n'
    )
    (folder / "jetdbt.yaml").write_text(f"profile:\n  warehouse: pg\n  schema: {schema}\n")
    (models / f"{name}_orders.sql").write_text("select 1 as id\n")
    gate = GATE.format(table=f"{schema}.release", orders=f"{name}_orders")
    (models / f"{name}_gate.sql").write_text(gate)
    return folder


class Runners:
    """The runner processes, one per host, each with a home and environment cache of its own."""

    def __init__(self, hosts: Hosts, root: Path, env: dict[str, str]):
        self.hosts, self.root, self.env = hosts, root, env
        self.procs: list = [None] * len(hosts.names)

    def home(self, i: int) -> Path:
        return self.root / f"runner{i}"

    def start(self, i: int) -> None:
        home = self.home(i)
        home.mkdir(exist_ok=True)
        env = {
            **self.env,
            "JETDBT_HOME": str(home),
            "JETDBT_ENVIRONMENTS_DIR": str(home / "environments"),
            "JETDBT_RUNNER_NAME": f"host{i}",
        }
        argv = [
            str(Path(sys.executable).parent / "jetdbt"),
            "--log-level",
            "info",
            "serve",
            "runner",
        ]
        self.procs[i] = self.hosts.popen(i, argv, env, self.root / f"runner{i}.log")

    def kill(self, i: int) -> None:
        """SIGKILL the runner alone: its dbt must die with it."""
        self.procs[i].send_signal(signal.SIGKILL)
        sweep_after_kill(self.procs[i], self.home(i))

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                stop_process(proc)


class Projectors:
    """Two `jetdbt serve projectors` processes: one folds each projection, the other stands
    by; the API's /healthz says which is which."""

    NAMES = ("proj-a", "proj-b")

    def __init__(self, stack: Stack, folder: Path, env: dict[str, str]):
        self.stack, self.folder, self.env = stack, folder, env
        self.served = [serve("projectors", name, folder, env) for name in self.NAMES]

    async def roles(self) -> dict:
        with contextlib.suppress(Exception):  # the API answers once NATS does
            _, body = await get_json(f"{self.stack.api_url}/healthz")
            return body["projectors"] or {}
        return {}

    async def active(self) -> str | None:
        return (await self.roles()).get("active")

    async def paired(self) -> dict | None:
        """The roles once one process folds and the other stands by."""
        roles = await self.roles()
        return roles if roles.get("active") and len(roles.get("standbys") or ()) == 1 else None

    def kill(self, name: str) -> None:
        self.served[self.NAMES.index(name)].kill()

    async def caught_up(self) -> bool:
        """Every projection's lag is 0."""
        projections = contract.load().projections
        with contextlib.suppress(Exception):  # NATS electing a new leader a moment
            async with self.stack.pool.acquire() as conn:
                found = await lag.lags(conn, self.stack.bus.js, projections)
            return all(p.lag == 0 for p in found.projections)
        return False

    def stop(self) -> None:
        for process in self.served:
            process.stop()


async def warehouse_sql(warehouse_url: str, sql: str) -> None:
    conn = await asyncpg.connect(warehouse_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def release(warehouse_url: str, schema: str) -> None:
    await warehouse_sql(warehouse_url, f"insert into {schema}.release values (1)")


def node_running(seen: Events, run_id: str, name: str) -> ev.RunStarted | None:
    """The run's last RunStarted once its gate has started and not finished in that attempt."""
    started = [e for e in seen.seen if isinstance(e, ev.RunStarted) and e.run_id == run_id]
    if not started:
        return None
    attempt, gate = started[-1].attempt, f"model.{name}.{name}_gate"
    begun = [e for e in seen.seen if isinstance(e, ev.NodeStarted) and e.run_id == run_id
             and e.attempt == attempt and e.unique_id == gate]  # fmt: skip
    return started[-1] if begun else None


async def idle(home: Path) -> bool:
    """No process works in `home` (dbt works in its job folder there)."""
    return not working_in(home)


def at_work(home: Path) -> list[str]:
    """The command lines of the processes working in `home`, for a failure to name."""
    found = []
    for pid in working_in(home):
        with contextlib.suppress(OSError):
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200])
    return [line.decode(errors="replace") for line in found]


async def last_activity(cluster, address: str) -> datetime | None:
    """The latest activity any live node saw on a client connection from `address`."""
    seen = []
    for node in cluster.nodes:
        if not node.running:
            continue
        url = f"http://127.0.0.1:{node.http_port}/connz?limit=1024"
        with contextlib.suppress(Exception):
            _, body = await get_json(url)
            for conn in body.get("connections") or []:
                if conn.get("ip") == address:
                    stamp = conn["last_activity"][:26].rstrip("Z")
                    seen.append(datetime.fromisoformat(stamp).replace(tzinfo=UTC))
    return max(seen, default=None)


async def test_runners_on_three_hosts_survive_a_kill_a_partition_and_a_lost_node(
    tmp_path, pg_url, warehouse_pg_url
):
    began = time.monotonic()
    tmp_path.chmod(0o755)
    schema = f"hosts_{uuid.uuid4().hex[:8]}"
    schemas = {p: f"{schema}_{p}" for p in PROJECTS}
    await warehouse_sql(
        warehouse_pg_url,
        "".join(f"create schema {s}; create table {s}.release (id int);" for s in schemas.values()),
    )
    parts = pg_parts(warehouse_pg_url)
    local = parts["host"].startswith("/")
    hosts = Hosts(3)
    cluster = forward = stack = runners = projectors = None
    try:
        hosts.open()
        # The runners' ack wait is the consumer's, chosen when the cluster's contract is applied.
        tuned = contract.consumer_overrides(load({"RUN_ACK_WAIT_SECONDS": str(ACK_WAIT)}))
        cluster = await start_cluster(tmp_path / "cluster", host=hosts.gateway, overrides=tuned)
        forward = await Forward(
            hosts.gateway,
            socket=Path(parts["host"]) / f".s.PGSQL.{parts['port']}" if local else None,
            target=None if local else (parts["host"], parts["port"]),
        ).start()
        warehouses = tmp_path / "warehouses.yaml"
        pg = {"type": "postgres", "host": hosts.gateway, "port": forward.port,
              "user": parts["user"], "dbname": parts["dbname"], "schema": schema}  # fmt: skip
        warehouses.write_text(yaml.safe_dump({"warehouses": {"pg": pg}}))
        common = {
            "NATS_URL": cluster.url,
            "JETDBT_WAREHOUSES": str(warehouses),
            "RUN_ACK_WAIT_SECONDS": str(ACK_WAIT),
            "JETDBT_STREAM_REPLICAS": "3",
            "MAX_RUNS_PER_RUNNER": "1",
            "MAX_RUNS_PER_TEAM": "3",  # the three builds are one team's
        }
        # The runners first: they touch no Postgres, and start while the API does.
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "NATS_URL")}
        runners = Runners(hosts, tmp_path, {**env, **common})
        for i in range(3):
            runners.start(i)
        settings = load(
            {
                **common,
                "JETDBT_HOME": str(tmp_path / "home"),
                "DATABASE_URL": pg_url,
                "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
                "JETDBT_API_PORT": "0",
            }
        )
        # The API alone in this process: the projectors are two processes of their own.
        stack = await Stack.serving(settings, {"api"}).start()
        projectors = Projectors(
            stack,
            tmp_path,
            {**common, "DATABASE_URL": pg_url, "JETDBT_SCHEMA": settings.schema,
             "JETDBT_PROJECTOR_LEASE_SECONDS": str(PROJECTOR_LEASE)},
        )  # fmt: skip
        seen = Events()
        sub = await stack.bus.nc.subscribe("dbt.evt.>", cb=seen.on_msg)
        await asyncio.gather(
            *(deploy_and_wait(stack.bus, gate_project(tmp_path / p, p, schemas[p]), p)
              for p in PROJECTS)
        )  # fmt: skip
        print(f"setup until three deployed: {time.monotonic() - began:.1f} s")
        for p in PROJECTS:
            command = RunCommand(command=BuildCommand(), run_id=f"{p}1", requested_by="ana")
            await stack.bus.publish_command("run", p, command, f"{p}1", principal="ana")

        async def all_gated():
            held = [node_running(seen, f"{p}1", p) for p in PROJECTS]
            return held if all(held) else None

        held = await wait_for(all_gated, timeout=90, interval=0.2)
        on = {e.run_id: int(e.runner.removeprefix("host")) for e in held}
        assert sorted(on.values()) == [0, 1, 2], f"one build on each runner (share 1): {on}"
        killed_run, cut_run, node_run = (f"{p}1" for p in PROJECTS)
        killed, cut = on[killed_run], on[cut_run]
        print(f"setup until three builds held: {time.monotonic() - began:.1f} s")

        # The three faults, each while a build runs.
        leader = await cluster.stream_leader(stack.bus.js)
        faulted = time.monotonic()
        await asyncio.to_thread(runners.kill, killed)
        hosts.cut(cut)
        await asyncio.to_thread(cluster.stop_node, leader)
        # dbt dies by a chain of parent-death signals: tens of milliseconds, not seconds.
        with contextlib.suppress(TimeoutError):
            await wait_for(lambda: idle(runners.home(killed)), 2 * ORPHAN_RESOLUTION)
        left = at_work(runners.home(killed))
        assert not left, f"dbt outlived its killed runner: {left}"
        runners.start(killed)  # the same host again, as a restarted machine
        await release(warehouse_pg_url, schemas[PROJECTS[0]])
        await release(warehouse_pg_url, schemas[PROJECTS[2]])

        with contextlib.suppress(TimeoutError):
            await wait_for(lambda: idle(runners.home(cut)), timeout=30, interval=0.2)
        assert not working_in(runners.home(cut)), f"not fenced: {at_work(runners.home(cut))}"
        fence = time.monotonic() - faulted
        await release(warehouse_pg_url, schemas[PROJECTS[1]])

        async def taken_over(run_id: str) -> ev.RunStarted | None:
            return next((e for e in seen.seen if isinstance(e, ev.RunStarted)
                         and e.run_id == run_id and e.attempt > 1), None)  # fmt: skip

        again = await wait_for(lambda: taken_over(cut_run), timeout=60, interval=0.1)
        takeover_cut = time.monotonic() - faulted
        assert again.runner != f"host{cut}"
        mended = datetime.now(UTC)
        hosts.mend(cut)
        again_killed = await wait_for(lambda: taken_over(killed_run), timeout=60, interval=0.1)
        takeover_killed = time.monotonic() - faulted

        # The active projector SIGKILLed while the two builds taken over run.
        standing = await wait_for(projectors.paired, timeout=30, interval=0.1)
        await asyncio.to_thread(projectors.kill, standing["active"])
        projector_killed = time.monotonic()

        async def standby_active():
            return await projectors.active() == standing["standbys"][0]

        await wait_for(standby_active, timeout=30, interval=0.02)
        takeover_projector = time.monotonic() - projector_killed
        await wait_for(projectors.caught_up, timeout=10, interval=0.02)
        lag_zero = time.monotonic() - projector_killed - takeover_projector
        print(f"projector takeover {takeover_projector:.2f} s after SIGKILL,"
              f" lag 0 {lag_zero:.2f} s later")  # fmt: skip
        assert lag_zero < 1.0, f"lag 0 only {lag_zero:.2f} s after the standby took over"

        finals = {}
        for p in PROJECTS:
            subject = subjects.run_event(p, f"{p}1", "finished")
            finals[p] = await wait_for(lambda s=subject: _last(stack.bus, s), timeout=90)
            assert finals[p].result.status == "passed", (p, finals[p].result.error)
        print(
            f"fence of the cut runner's dbt {fence:.1f} s, takeover: cut {takeover_cut:.1f} s,"
            f" killed {takeover_killed:.1f} s (lease TTL 15 s)"
        )
        assert again_killed.runner != f"host{killed}" or again_killed.attempt == 2

        async def back_on_the_bus():
            at = await last_activity(cluster, hosts.addresses[cut])
            return at is not None and at > mended

        await wait_for(back_on_the_bus, timeout=60, interval=0.5)
        await asyncio.sleep(1)  # whatever it still had to say has arrived by now
        await sub.unsubscribe()

        for p in PROJECTS:
            run_id = f"{p}1"
            history = await audit.run_history(stack.bus, run_id, p)
            ends = [e for e in history.entries if e.type == FINISHED]
            assert len(ends) == 1, f"{run_id} ended {len(ends)} times"
            code, body = await wait_for(
                lambda r=run_id: _shown(stack.api_url, r), timeout=30, interval=0.3
            )
            assert not [n for n in body["nodes"] if n["status"] == "running"], body
        history = await audit.run_history(stack.bus, cut_run, PROJECTS[1])
        newest = max(e.seq for e in history.entries
                     if e.type == STARTED and e.payload["attempt"] > 1)  # fmt: skip
        old = again.attempt - 1
        stale = [(e.seq, e.type) for e in history.entries if e.seq > newest
                 and isinstance(e.payload, dict) and e.payload.get("attempt") == old]  # fmt: skip
        assert not stale, f"the cut-off runner published its old attempt afterwards: {stale}"
        replayed = await jetdbt(stack, "replay", "--all")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert "\n0 differences" in replayed.stdout, replayed.stdout[-2000:]
        print(f"whole test {time.monotonic() - began:.1f} s")
    finally:
        if runners is not None:
            await asyncio.to_thread(runners.stop)
        if projectors is not None:
            await asyncio.to_thread(projectors.stop)
        hosts.close()
        if stack is not None:
            await stack.stop()
        if forward is not None:
            await forward.stop()
        if cluster is not None:
            await asyncio.to_thread(cluster.stop)
        dropped = "".join(f"drop schema if exists {s} cascade;" for s in schemas.values())
        await warehouse_sql(warehouse_pg_url, dropped)


async def _last(bus, subject: str):
    with contextlib.suppress(Exception):  # NATS electing a new leader a moment
        return await bus.last_event(subject)
    return None


async def _shown(api_url: str, run_id: str):
    code, body = await get_json(f"{api_url}/v1/runs/{run_id}")
    return (code, body) if code == 200 and body.get("status") == "passed" else None

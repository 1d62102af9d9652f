"""A three-node JetStream cluster on loopback: what production runs (R3 streams), on one machine.

Each node is a nats-server child (the binary `jetdbt.services.stack.embedded.nats_binary()` finds)
with its own client, route and monitoring port and its own store folder; the ports
are fixed for the cluster's life, so a node stopped and started again rejoins as
itself. A node counts as up when its monitoring `/healthz` answers 200: JetStream
has a meta leader and every replica on that node has caught up.

jetdbt reaches it with a comma-separated NATS_URL (`NatsCluster.url`);
`jetdbt.shared.bus.connection.connect` splits it. `replicate` applies the contract at three
replicas before any service starts; the contract never shrinks a stream's replicas, so they stay R3.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from jetdbt.services.stack.embedded import free_port, nats_binary
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.connection import TRANSIENT
from jetdbt.shared.bus.streams import EVENTS
from nats.js.errors import BadRequestError

__all__ = ["NatsCluster", "replicate"]

_CONFIG = """\
server_name: {name}
listen: {host}:{port}
http: 127.0.0.1:{http_port}
jetstream {{
  store_dir: "{store}"
}}
cluster {{
  name: {cluster}
  listen: 127.0.0.1:{route_port}
  routes: [{routes}]
}}
"""


class _Node:
    """One cluster member: its ports, its folder and, while it runs, its process."""

    def __init__(self, name: str, folder: Path):
        self.name = name
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        self.pick_ports()

    def pick_ports(self) -> None:
        self.port, self.route_port, self.http_port = free_port(), free_port(), free_port()

    def clashed(self) -> bool:
        """It exited at start because a port it was given was taken meanwhile (free_port
        only says a port was free when asked: another test may bind it before this node)."""
        if self.running:
            return False
        log = self.folder / "nats-server.log"
        return "address already in use" in log.read_text(errors="replace").lower()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self, cluster: str, routes: list[int], host: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "nats-server.conf"
        config.write_text(
            _CONFIG.format(
                name=self.name,
                host=host,
                port=self.port,
                http_port=self.http_port,
                store=self.folder / "jetstream",
                cluster=cluster,
                route_port=self.route_port,
                routes=", ".join(f"nats-route://127.0.0.1:{p}" for p in routes),
            )
        )
        return config

    def spawn(self) -> None:
        log = open(self.folder / "nats-server.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [nats_binary(), "-c", str(self.folder / "nats-server.conf")],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def healthy(self) -> bool:
        url = f"http://127.0.0.1:{self.http_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def halt(self, sig: signal.Signals) -> None:
        if not self.running:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class NatsCluster:
    """Three (or `size`) nats-servers routed to each other, JetStream on every node.

    `start`, `stop_node`, `start_node` and `stop` block until the nodes are healthy or
    gone; async callers run them in a thread (`asyncio.to_thread`).
    """

    def __init__(
        self, data_dir: Path, size: int = 3, name: str = "jetdbt", host: str = "127.0.0.1"
    ):
        self.name = name
        self.host = host  # where clients connect: a private address other namespaces reach
        self.nodes = [_Node(f"n{i}", Path(data_dir) / f"n{i}") for i in range(size)]
        self._write_configs()

    def _write_configs(self) -> None:
        routes = [n.route_port for n in self.nodes]
        for node in self.nodes:
            node.write_config(self.name, routes, self.host)

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what NATS_URL takes)."""
        return ",".join(f"nats://{self.host}:{n.port}" for n in self.nodes)

    def index(self, server_name: str) -> int:
        """The node a server name (as JetStream reports it) belongs to."""
        for i, node in enumerate(self.nodes):
            if node.name == server_name:
                return i
        raise KeyError(f"no node named {server_name!r} in cluster {self.name}")

    def _wait_healthy(self, nodes: list[_Node], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                if not node.running:
                    raise RuntimeError(
                        f"nats-server {node.name} exited with {node.proc.returncode};"
                        f" see {node.folder / 'nats-server.log'}"
                    )
                if node.healthy():
                    waiting.remove(node)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(n.name for n in waiting)
                raise RuntimeError(f"nats-server {names} not healthy within {timeout}s")
            time.sleep(0.1)

    def start(self, timeout: float = 30.0, tries: int = 3) -> NatsCluster:
        """Start every node; a start lost to a port taken meanwhile is tried again, every
        node on fresh ports and an empty store (the cluster has not formed yet)."""
        tried = 0
        while True:
            tried += 1
            for node in self.nodes:
                node.spawn()
            try:
                self._wait_healthy(self.nodes, timeout)
            except BaseException:
                self.stop()
                if tried == tries or not any(n.clashed() for n in self.nodes):
                    raise
                for node in self.nodes:
                    shutil.rmtree(node.folder / "jetstream", ignore_errors=True)
                    (node.folder / "nats-server.log").unlink(missing_ok=True)
                    node.pick_ports()
                self._write_configs()
                continue
            return self

    def stop_node(self, index: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop one node; SIGKILL by default (a crash, no leadership handed over)."""
        self.nodes[index].halt(sig)

    def start_node(self, index: int, timeout: float = 60.0) -> None:
        """Start a stopped node again and wait until it has caught up."""
        node = self.nodes[index]
        if not node.running:
            node.spawn()
        self._wait_healthy([node], timeout)

    def restart_node(self, index: int, sig: signal.Signals = signal.SIGKILL) -> None:
        self.stop_node(index, sig)
        self.start_node(index)

    async def stream_leader(self, js, stream: str = EVENTS) -> int:
        """The index of the node leading `stream`'s replicas (asked of any live node)."""
        info = await js.stream_info(stream)
        if info.cluster is None or not info.cluster.leader:
            raise RuntimeError(f"stream {stream} has no leader right now")
        return self.index(info.cluster.leader)

    def stop(self) -> None:
        for node in self.nodes:
            node.halt(signal.SIGTERM)


# The server's "no suitable peers for placement": a replicated stream asked of a cluster
# whose nodes do not all know each other yet.
NO_PEERS = 10005


async def replicate(js, replicas: int = 3, overrides: dict | None = None) -> None:
    """Apply the contract at `replicas` (`jetdbt contract apply --replicas`), with the
    consumer settings `overrides`, as a cluster's first service needs before it starts,
    and wait until every replica has caught up."""
    spec = contract.load()
    await _placed(lambda: contract.ensure(js, spec, overrides, replicas=replicas))
    backing = [f"KV_{name}" for name in spec.key_value]
    backing += [f"OBJ_{name}" for name in spec.object_stores]
    await _all_current(js, [*spec.streams, *backing], replicas)


async def _placed(placing, timeout: float = 60.0) -> None:
    """`placing()` (a stream's creation or its replicas raised), again while the cluster's
    nodes still learn of each other: a node healthy on its own may not yet count its peers
    (the server answers "no suitable peers for placement"), and a loaded meta leader may not
    answer in time (both are idempotent)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await placing()
        except (BadRequestError, *TRANSIENT) as exc:
            meeting = not isinstance(exc, BadRequestError) or exc.err_code == NO_PEERS
            if not meeting or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _all_current(js, names: list[str], replicas: int, timeout: float = 30.0) -> None:
    """Wait until each stream has a leader and its other replicas have caught up."""
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            cluster = (await js.stream_info(name)).cluster
            peers = (cluster.replicas or []) if cluster else []
            if cluster and cluster.leader and sum(p.current for p in peers) >= replicas - 1:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream {name} did not reach {replicas} current replicas")
            await asyncio.sleep(0.1)

"""Machines of a test's own inside this one: network namespaces on a private bridge.

Each "host" is a network namespace with a veth pair: one end inside (its own address), the
other on a bridge the test makes, which holds the address the host side listens on (NATS,
the warehouse's forwarder). Nothing listens on a public interface: the bridge's subnet is
private and exists only inside this machine. `cut` takes a host's link down (a partition:
its processes live on, unreachable) and `mend` brings it back. Names carry a random tag, so
parallel test workers never collide; `close` removes every namespace, link and bridge.
Needs root (`ip netns`).
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from pathlib import Path

__all__ = ["Hosts"]


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=10)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.200.0.0/13 no interface of this machine has an address in."""
    taken = subprocess.run(
        ["ip", "-o", "-4", "addr"], check=True, capture_output=True, text=True
    ).stdout
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{200 + secrets.randbelow(8)}.{secrets.randbelow(256)}.0/24")
        if f"inet {str(net.network_address)[:-1]}" not in taken:
            return net
    raise RuntimeError("no free private /24 under 10.200.0.0/13")


class Hosts:
    """`count` namespaces on one bridge; `gateway` is the bridge's address (the host side)."""

    def __init__(self, count: int):
        self.tag = secrets.token_hex(3)
        self.net = _free_subnet()
        self.gateway = str(self.net.network_address + 1)
        self.bridge = f"jb{self.tag}"
        self.names = [f"jetdbt-{self.tag}-{i}" for i in range(count)]
        self.outside = [f"jh{self.tag}{i}" for i in range(count)]  # the bridge's end
        self.addresses = [str(self.net.network_address + 10 + i) for i in range(count)]
        self._made: list[tuple[str, ...]] = []  # what close() deletes, newest first

    def open(self) -> Hosts:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", "del", self.bridge))
            _ip("addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, ns in enumerate(self.names):
                inside = f"jn{self.tag}{i}"
                _ip("netns", "add", ns)
                self._made.append(("netns", "del", ns))  # takes the pair with it
                _ip("link", "add", self.outside[i], "type", "veth", "peer", "name", inside)
                _ip("link", "set", inside, "netns", ns)
                _ip("link", "set", self.outside[i], "master", self.bridge, "up")
                _ip("addr", "add", f"{self.addresses[i]}/{self.net.prefixlen}", "dev", inside,
                    netns=ns)  # fmt: skip
                _ip("link", "set", inside, "up", netns=ns)
                _ip("link", "set", "lo", "up", netns=ns)
        except BaseException:
            self.close()
            raise
        return self

    def popen(self, i: int, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        """`argv` started inside host `i`, in a session of its own. nsenter, not `ip netns
        exec`, which mounts a /sys of its own and so hides the cgroups the sandbox uses; it
        execs the command, so the process's pid is the command's."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                ["nsenter", f"--net=/var/run/netns/{self.names[i]}", *argv],
                env=env,
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def cut(self, i: int) -> None:
        """Host `i` loses its link: a partition, not a death."""
        _ip("link", "set", self.outside[i], "down")

    def mend(self, i: int) -> None:
        _ip("link", "set", self.outside[i], "up")

    def close(self) -> None:
        for args in reversed(self._made):
            subprocess.run(["ip", *args], capture_output=True, timeout=10)
        self._made.clear()

    def __enter__(self) -> Hosts:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

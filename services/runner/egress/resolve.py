"""Where the egress gate connects for a host: the operator's hosts file first (private
endpoints, tests' stand-ins), then DNS. Resolution happens here, outside the sandbox, so a
run never resolves a name itself, and a DNS answer pointing at this machine or a cloud's
metadata service (loopback, link-local, unspecified, multicast) is refused, and so is such an
address asked for as itself: only the hosts file can send a request there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import Path

import msgspec
from jetdbt.services.runner.egress.hosts import is_host, normal_host
from jetdbt.shared.process import logging as jlog

__all__ = ["AddressRefused", "Resolved", "Resolver"]

_log = jlog.get("egress.resolve")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """A host resolved to an address the gate never connects to by a name from DNS."""


class Resolved(msgspec.Struct, frozen=True):
    """Where to connect, in order, and from where that came (for the operator's log)."""

    addresses: list[tuple[int, tuple]]
    source: str  # "hosts file", "address" (the host is one) or "dns"


class Resolver:
    """Names to addresses; the hosts file is read again whenever it changes."""

    def __init__(self, hosts_file: Path | None) -> None:
        self._path = hosts_file
        self._stamp: tuple[int, int] | None = None
        self._names: dict[str, list[Address]] = {}
        self._told: set[str] = set()  # malformed lines already logged

    async def addresses(self, host: str, port: int) -> Resolved:
        """Where `host`:`port` is, or AddressRefused; OSError when it cannot be resolved."""
        host = normal_host(host)
        mapped = self.mapped(host)
        if mapped:
            return Resolved([_sockaddr(a, port) for a in mapped], "hosts file")
        literal = _address(host)
        if literal is not None:
            return Resolved([_sockaddr(_allowed(host, literal), port)], "address")
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        found = list(dict.fromkeys((family, sockaddr) for family, _, _, _, sockaddr in infos))
        for _, sockaddr in found:
            _allowed(host, ipaddress.ip_address(sockaddr[0]))
        return Resolved(found, "dns")

    def mapped(self, host: str) -> list[Address]:
        """The hosts file's addresses for `host` (none: the file does not name it); the TCP
        relay connects there too, so a private endpoint is named in one place."""
        return list(self._table().get(normal_host(host), ()))

    def _table(self) -> dict[str, list[Address]]:
        if self._path is None:
            return {}
        try:
            status = self._path.stat()
            stamp = (status.st_mtime_ns, status.st_size)
            if stamp != self._stamp:
                self._names, self._stamp = self._read(self._path.read_text()), stamp
        except (OSError, UnicodeDecodeError) as exc:
            self._tell(f"unreadable:{exc}", path=str(self._path), error=str(exc))
            self._names, self._stamp = {}, None
        return self._names

    def _read(self, text: str) -> dict[str, list[Address]]:
        """`ADDRESS NAME [NAME...]` per line, `#` comments; a malformed line is skipped."""
        names: dict[str, list[Address]] = {}
        for number, line in enumerate(text.splitlines(), 1):
            words = line.partition("#")[0].split()
            if not words:
                continue
            address = _address(words[0])
            hosts = [normal_host(w) for w in words[1:]]
            if address is None or not hosts or not all(map(is_host, hosts)):
                self._tell(line, path=str(self._path), line=number)
                continue
            for host in hosts:
                names.setdefault(host, []).append(address)
        return names

    def _tell(self, key: str, **fields: object) -> None:
        if key not in self._told:
            self._told.add(key)
            _log.warning(
                "egress_hosts_file_skipped",
                remedy="write ADDRESS NAME [NAME...] per line, '#' for comments",
                **fields,
            )


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _allowed(host: str, address: Address) -> Address:
    """`address` if the gate may reach it by `host` without the hosts file naming it."""
    seen = getattr(address, "ipv4_mapped", None) or address
    if seen.is_loopback or seen.is_link_local or seen.is_unspecified or seen.is_multicast:
        raise AddressRefused(
            f"{host} resolves to {address}, an address of this machine, a link-local service"
            " (a cloud's metadata server) or no single host; the gate reaches such an address"
            f" only when the operator names it: add '{address} {host}' to the file"
            " JETDBT_EGRESS_HOSTS_FILE names"
        )
    return address


def _sockaddr(address: Address, port: int) -> tuple[int, tuple]:
    if address.version == 6:
        return socket.AF_INET6, (str(address), port, 0, 0)
    return socket.AF_INET, (str(address), port)

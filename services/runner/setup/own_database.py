"""A warehouse on jetdbt's own Postgres server is refused when the runner starts: a
project's SQL there would run as jetdbt's own user over every team's projections (runs,
deploys, grants), and with the embedded server's trust login as its superuser.

Where a connection lands is a server, never a database (every database of a server is one
login away): a unix socket's folder and port, or a host's addresses and port. Every address
a host name resolves to counts; a loopback or unspecified address (127.1, 0.0.0.0, ::,
::ffff:127.0.0.1, 2130706433) or one of this machine's own is this machine, and so is a
socket, so a socket and a TCP address of this machine on the same port are one server. A
list of hosts or ports (libpq's `a,b`) is refused: each would have to be checked. A
forwarder on another port is not seen: the warehouse's own credentials are what bound it.
jetdbt's server is DATABASE_URL's, or the embedded one the stack started. A project's own
profiles.yml is checked likewise before each of its jobs (`check_job`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from jetdbt.services.runner.egress.hosts import profile_endpoint
from jetdbt.services.runner.setup.secrets import Resolver, UnresolvedReference
from jetdbt.services.runner.setup.warehouses import Warehouse, render_output

__all__ = [
    "NotTheNamedWarehouse",
    "OwnDatabase",
    "Place",
    "check",
    "check_job",
    "check_own_profile",
    "place_of_output",
    "place_of_url",
    "same_server",
]

_PORT = 5432  # Postgres's, when none is named
_MACHINE = "this machine"


class OwnDatabase(ValueError):
    """A configured warehouse reaches jetdbt's own database server."""


class NotTheNamedWarehouse(ValueError):
    """A project's own profile connects elsewhere than the warehouse it names."""


class Place(NamedTuple):
    """Where a connection lands: a host (or a socket's folder) and a port."""

    host: str
    port: int

    def __str__(self) -> str:
        if self.host.startswith("/"):
            return f"socket {self.host}/.s.PGSQL.{self.port}"
        return f"{self.host}:{self.port}"


def _place(host: Any, port: Any) -> Place | None:
    if not host:
        return None
    host, port = str(host).strip(), str(port or _PORT).strip()
    if "," in host or "," in port:
        raise OwnDatabase(
            f"host {host!r}, port {port!r} is a list of servers: name one host and one port"
        )
    # A socket's folder, its links resolved (its case is the file system's); else a host.
    host = os.path.realpath(host) if host.startswith("/") else host.lower()
    try:
        return Place(host, int(port))
    except ValueError:
        return None  # a template: dbt renders it, and the sandbox reaches no such endpoint


def _is_local(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A loopback or unspecified address, or one this machine holds (it can bind it)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


def _addresses(host: str) -> set[str]:
    """The machines `host` reaches: this machine for a socket or a local address, else every
    address it resolves to (its name where it does not resolve)."""
    if host.startswith("/"):
        return {_MACHINE}
    try:
        found = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return {host}
    ips = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in found}
    return {_MACHINE if _is_local(ip) else str(ip) for ip in ips}


def same_server(a: Place, b: Place) -> bool:
    """Whether two places are one Postgres server (see the module's docstring)."""
    if a.port != b.port:
        return False
    if a.host.startswith("/") and b.host.startswith("/"):
        return a.host == b.host
    return bool(_addresses(a.host) & _addresses(b.host))


def place_of_url(url: str) -> Place | None:
    """Where a libpq URL (`postgresql://user:pw@host:port/db?host=/socket/folder`) lands;
    the password is never part of it."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        port = query.get("port") or parts.port
    except ValueError:
        return None
    return _place(query.get("host") or parts.hostname or "localhost", port)


def place_of_output(output: dict[str, Any]) -> Place | None:
    """Where a dbt outputs block lands (None: it names no host), by the host the sandbox's
    relay reaches for it (`host`, or `server`): what is checked is what is reached."""
    host, _ = profile_endpoint(output)
    if output.get("port") is None and not isinstance(output.get("host"), str):
        return None  # a `server` with no port: the relay reaches nothing for it
    return _place(host, output.get("port"))


def _refusal(what: str, own: Place) -> OwnDatabase:
    return OwnDatabase(
        f"{what} reaches jetdbt's own database server ({own}): a project's SQL there would"
        " run as jetdbt's own user, over every team's runs; give it a server of its own"
    )


def check(warehouses: dict[str, Warehouse], own: Place | None, resolver: Resolver) -> None:
    """Raise OwnDatabase naming the first warehouse that reaches jetdbt's server `own`
    (None: unknown), or names a list of servers. A warehouse whose references do not
    resolve yet is left to its runs, whose profiles `check_job` sees."""
    if own is None:
        return
    for wh in warehouses.values():
        if wh.type == "duckdb":
            continue
        try:
            output = render_output(wh, resolver)
        except (UnresolvedReference, ValueError):
            continue
        try:
            place = place_of_output(output)
        except OwnDatabase as exc:
            raise OwnDatabase(f"warehouse {wh.name!r}: {exc}") from None
        if place is not None and same_server(place, own):
            raise _refusal(f"warehouse {wh.name!r}", own)


def check_job(place: Place | None, own: Place | None) -> None:
    """Raise OwnDatabase when a job's profile (a project's own profiles.yml among them)
    lands at `place` on jetdbt's own server `own`."""
    if own is not None and place is not None and same_server(place, own):
        raise _refusal("this project's profile", own)


def check_own_profile(place: Place | None, wh: Warehouse, resolver: Resolver) -> None:
    """Raise NotTheNamedWarehouse when a project's own profiles.yml lands at `place`, not on
    the server of `wh`, the warehouse it names (`profile.warehouse`): a team is granted that
    warehouse, and the grant bounds nothing if the profile may connect anywhere."""
    if place is None:
        return
    named = None if wh.type == "duckdb" else place_of_output(render_output(wh, resolver))
    if named is None or not same_server(place, named):
        raise NotTheNamedWarehouse(
            f"this project's profile connects to {place}, not to warehouse {wh.name!r}"
            f" ({named or 'a file warehouse'}) that it names in profile.warehouse: a"
            " project's own profiles.yml must connect to the server of the warehouse it names"
        )

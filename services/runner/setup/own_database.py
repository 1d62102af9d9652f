"""A warehouse on jetdbt's own database is refused when the runner starts: a project's SQL
there would run as jetdbt's own user over every team's projections (runs, deploys, grants).

Two connections reach the same database when they name the same unix socket (its folder
and port) or the same host and port, and the same database name; localhost, 127.0.0.1 and
::1 are one host. jetdbt's database is DATABASE_URL, or the embedded Postgres the stack
started. A forwarder or another name of the same host is not seen: the warehouse's own
credentials are what bound it, and the operator writes them. A project's own profiles.yml
is checked likewise before each of its jobs (`check_job`).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from services.runner.setup.secrets import Resolver, UnresolvedReference
from services.runner.setup.warehouses import Warehouse, render_output

__all__ = ["OwnDatabase", "Place", "check", "check_job", "place_of_output", "place_of_url"]

_LOCAL = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_PORT = 5432  # Postgres's, when none is named


class OwnDatabase(ValueError):
    """A configured warehouse reaches jetdbt's own database."""


class Place(NamedTuple):
    """Where a connection lands: a host (or a socket's folder), a port, a database."""

    host: str
    port: int
    dbname: str

    def __str__(self) -> str:
        if self.host.startswith("/"):
            return f"database {self.dbname!r} on socket {self.host}/.s.PGSQL.{self.port}"
        return f"database {self.dbname!r} on {self.host}:{self.port}"


def _place(host: Any, port: Any, dbname: Any) -> Place | None:
    if not host or not dbname:
        return None
    host = str(host).strip()
    if host.startswith("/"):
        host = os.path.realpath(host)  # a socket's folder: its case is the file system's
    else:
        host = "localhost" if host.lower() in _LOCAL else host.lower()
    try:
        return Place(host, int(port or _PORT), str(dbname))
    except (TypeError, ValueError):
        return None


def place_of_url(url: str) -> Place | None:
    """Where a libpq URL (`postgresql://user:pw@host:port/db?host=/socket/folder`) lands;
    the password is never part of it."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        port = query.get("port") or parts.port
    except ValueError:
        return None
    dbname = query.get("dbname") or parts.path.lstrip("/") or parts.username or "postgres"
    return _place(query.get("host") or parts.hostname or "localhost", port, dbname)


def place_of_output(output: dict[str, Any]) -> Place | None:
    """Where a dbt outputs block lands (None: it names no host and database)."""
    return _place(
        output.get("host"), output.get("port"), output.get("dbname") or output.get("database")
    )


def _refusal(what: str, own: Place) -> OwnDatabase:
    return OwnDatabase(
        f"{what} reaches jetdbt's own database ({own}): a project's SQL there would run as"
        " jetdbt's own user, over every team's runs"
    )


def check(warehouses: dict[str, Warehouse], own: Place | None, resolver: Resolver) -> None:
    """Raise OwnDatabase naming the first warehouse that reaches jetdbt's database `own`
    (None: unknown). A warehouse whose references do not resolve yet is left to its runs,
    whose profiles `check_job` sees."""
    if own is None:
        return
    for wh in warehouses.values():
        if wh.type == "duckdb":
            continue
        try:
            place = place_of_output(render_output(wh, resolver))
        except (UnresolvedReference, ValueError):
            continue
        if place == own:
            raise _refusal(f"warehouse {wh.name!r}", own) from None


def check_job(place: Place | None, own: Place | None) -> None:
    """Raise OwnDatabase when a job's profile (a project's own profiles.yml among them)
    lands at `place`, jetdbt's own database."""
    if own is not None and place == own:
        raise _refusal("this project's profile", own)

"""Warehouses configured by name on the runner side, rendered into dbt's profiles.yml.

A project never carries a connection: it names a warehouse (`main` by default)
and the runner renders the target from its own configuration, a YAML file
(JETDBT_WAREHOUSES) whose secrets are `$env:`/`$var:` references resolved here.
Nothing of this ever goes on the bus.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml
from jetdbt.services.runner.egress import hosts
from jetdbt.services.runner.setup import connections, run_credentials
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.shared.identity import warehouse_grants
from jetdbt.shared.project.schema_names import project_schema

__all__ = [
    "Warehouse",
    "UnknownWarehouse",
    "load_warehouses",
    "pick",
    "render_output",
    "render_profiles",
    "schema_of",
]

_ADAPTER = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")


class Warehouse(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A DuckDB file, a connection of one of connections.CONNECTION_TYPES (postgres also
    by the flat keys below), or a `dbt_profile`: one outputs block of dbt's, verbatim.
    `teams` are the teams it is granted to (None: every team;
    shared/identity/warehouse_grants.py)."""

    type: Literal[
        "duckdb", "postgres", "redshift", "snowflake", "bigquery", "databricks", "mysql",
        "dbt_profile",
    ]  # fmt: skip
    name: str = ""
    target: str = "main"
    threads: int = 4
    path: str | None = None
    host: str | None = None
    port: int = 5432
    user: str | None = None
    password: str | None = None
    dbname: str | None = None
    schema: str | None = None
    sslmode: str | None = None
    output: dict[str, Any] | None = None
    connection: dict[str, Any] | None = None
    # per_run: each run logs in as a role of its own, made and dropped by the runner
    # (services/runner/setup/run_credentials.py); configured: the login above, as is.
    credentials: Literal["configured", "per_run"] = "configured"
    teams: warehouse_grants.Teams = None
    # Projects share the warehouse: one whose descriptor names no schema builds into a schema
    # named after it (shared/project/schema_names.py), so two projects' `customers` are two tables.
    schema_per_project: bool = False
    # What a run may reach besides what its adapter needs (services/runner/egress/hosts.py):
    # hosts for HTTP(S) through the egress gate, and more host:port for the TCP relay (a
    # replica, a second node).
    allow_hosts: tuple[str, ...] = ()
    relay: tuple[str, ...] = ()

    def adapter(self) -> str:
        if self.type == "dbt_profile":
            return str((self.output or {}).get("type", ""))
        if self.type in connections.CONNECTION_TYPES:
            return connections.CONNECTION_TYPES[self.type].adapter
        return self.type

    def connection_keys(self) -> dict[str, Any]:
        """A connection type's keys: `connection`, over postgres's flat keys."""
        flat = {}
        if self.type == "postgres":
            names = ("host", "port", "user", "password", "dbname", "schema", "sslmode")
            flat = {k: getattr(self, k) for k in names if getattr(self, k) is not None}
            flat.setdefault("password", "")  # dbt-postgres requires the key
        return {**flat, **(self.connection or {})}


class UnknownWarehouse(LookupError):
    pass


def _check(wh: Warehouse) -> Warehouse:
    run_credentials.check(wh)
    for host in wh.allow_hosts:
        hosts.parse_rule(host, f"warehouse {wh.name!r} allow_hosts")
    for endpoint in wh.relay:
        hosts.parse_endpoint(endpoint, f"warehouse {wh.name!r} relay")
    if wh.type == "duckdb" and not wh.path:
        raise ValueError(f"warehouse {wh.name!r}: a duckdb warehouse needs 'path'")
    if wh.type in connections.CONNECTION_TYPES:
        connections.check(wh.type, wh.connection_keys(), wh.name)
    if wh.type == "dbt_profile":
        if not isinstance(wh.output, dict):
            raise ValueError(
                f"warehouse {wh.name!r}: a dbt_profile warehouse needs 'output',"
                " one outputs block of a profiles.yml"
            )
        if not _ADAPTER.match(wh.adapter()):
            raise ValueError(
                f"warehouse {wh.name!r}: adapter type {wh.adapter()!r} must match"
                " [a-z0-9][a-z0-9_-]*"
            )
    return wh


def load_warehouses(path: Path | None, default_duckdb: Path) -> dict[str, Warehouse]:
    """The configured warehouses; with no file, the embedded default: DuckDB named `main`,
    shared by every project, each in a schema of its own."""
    if path is None:
        default = warehouse_grants.DEFAULT
        embedded = Warehouse(
            name=default, type="duckdb", path=str(default_duckdb), schema_per_project=True
        )
        return {default: embedded}
    out = {}
    for name, body in warehouse_grants.entries(path).items():
        try:
            wh = msgspec.convert({**body, "name": name}, Warehouse)
        except msgspec.ValidationError as exc:
            raise ValueError(f"warehouse {name!r}: {exc}") from None
        out[name] = _check(wh)
    return out


def pick(warehouses: dict[str, Warehouse], name: str) -> Warehouse:
    try:
        return warehouses[name]
    except KeyError:
        configured = ", ".join(sorted(warehouses)) or "none"
        raise UnknownWarehouse(
            f"warehouse {name!r} is not configured; configured: {configured}"
        ) from None


def schema_of(wh: Warehouse, project: str, named: str | None) -> str | None:
    """The schema a project's descriptor has it build into: the one it names, else on a
    warehouse shared by projects one of its own, else the warehouse's (None)."""
    if named or not wh.schema_per_project:
        return named
    return project_schema(project)


def render_output(
    wh: Warehouse, resolver: Resolver, *, schema: str | None = None, threads: int | None = None
) -> dict[str, Any]:
    """One outputs block for dbt; the descriptor's schema and threads override the block's."""
    where = f"warehouse {wh.name!r}"
    if wh.type == "duckdb":
        Path(wh.path).parent.mkdir(parents=True, exist_ok=True)
        out: dict[str, Any] = {"type": "duckdb", "path": wh.path}
        if wh.schema:
            out["schema"] = wh.schema
    elif wh.type in connections.CONNECTION_TYPES:
        place = where if wh.connection is None else f"{where}.connection"
        out = connections.render(wh.type, wh.connection_keys(), resolver, place)
    else:
        out = resolver.resolve(dict(wh.output or {}), f"{where}.output")
    out["threads"] = threads or out.get("threads") or wh.threads
    if schema:
        out["schema"] = schema
    return out


def render_profiles(profile_name: str, target: str, output: dict[str, Any]) -> str:
    """profiles.yml text with one target for the project's profile."""
    doc = {profile_name: {"target": target, "outputs": {target: output}}}
    return yaml.safe_dump(doc, sort_keys=False)

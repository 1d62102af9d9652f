"""Connection types: a warehouse given as a connection, rendered as its adapter's profile.

An operator describes a warehouse in one vocabulary (host, port, user, password, database,
schema, plus what the platform itself needs: a Snowflake account, a BigQuery project, a
Databricks http_path); each type here says which keys its adapter needs, how that adapter
spells the common ones (dbt-mysql's `server` and `username`, dbt-postgres's `dbname`) and
its defaults. Every value may be a `$env:`/`$var:` reference, resolved when rendered. A
`dbt_profile` warehouse needs none of this: its block is dbt's own, passed through as is.
"""

from __future__ import annotations

from typing import Any

import msgspec
from jetdbt.services.runner.setup.secrets import Resolver

__all__ = ["CONNECTION_TYPES", "ConnectionType", "check", "render"]


class ConnectionType(msgspec.Struct, frozen=True, kw_only=True):
    adapter: str
    required: tuple[str, ...]  # in the adapter's spelling
    renamed: dict[str, str] = {}  # the common spelling: the adapter's
    defaults: dict[str, Any] = {}


_POSTGRES_LIKE = {"database": "dbname"}
CONNECTION_TYPES: dict[str, ConnectionType] = {
    "postgres": ConnectionType(
        adapter="postgres",
        required=("host", "user", "dbname"),
        renamed=_POSTGRES_LIKE,
        defaults={"port": 5432, "schema": "public"},
    ),
    "redshift": ConnectionType(
        adapter="redshift",
        required=("host", "user", "dbname"),
        renamed=_POSTGRES_LIKE,
        defaults={"port": 5439, "schema": "public"},
    ),
    "snowflake": ConnectionType(
        adapter="snowflake",
        required=("account", "user", "database", "warehouse", "schema"),
    ),
    "bigquery": ConnectionType(
        adapter="bigquery",
        required=("project", "schema"),
        renamed={"dataset": "schema", "database": "project"},
        defaults={"method": "oauth"},
    ),
    "databricks": ConnectionType(
        adapter="databricks",
        required=("host", "http_path", "schema"),
        renamed={"database": "catalog"},
    ),
    "mysql": ConnectionType(
        adapter="mysql",
        required=("server", "username", "schema"),
        renamed={"host": "server", "user": "username", "database": "schema"},
        defaults={"port": 3306},
    ),
}


def _spelled(kind: str, connection: dict[str, Any]) -> dict[str, Any]:
    spec = CONNECTION_TYPES[kind]
    out = dict(spec.defaults)
    for key, value in connection.items():
        out[spec.renamed.get(key, key)] = value
    out["type"] = spec.adapter
    return out


def check(kind: str, connection: dict[str, Any], name: str) -> None:
    """Raise ValueError naming the keys a `kind` connection lacks."""
    spelled = _spelled(kind, connection)
    missing = [k for k in CONNECTION_TYPES[kind].required if spelled.get(k) in (None, "")]
    if missing:
        common = {v: k for k, v in CONNECTION_TYPES[kind].renamed.items()}
        named = [f"{k} (or {common[k]})" if k in common else k for k in missing]
        raise ValueError(f"warehouse {name!r}: a {kind} connection needs {', '.join(named)}")


def render(kind: str, connection: dict[str, Any], resolver: Resolver, where: str) -> dict[str, Any]:
    """The profile output of a `kind` connection, its references resolved (`where` names
    the keys in a reference's refusal)."""
    return resolver.resolve(_spelled(kind, connection), where)

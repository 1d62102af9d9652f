"""Each connection type renders its adapter's profile; a dbt_profile block passes verbatim."""

from __future__ import annotations

import re

import pytest
import yaml
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import load_warehouses, render_output, render_profiles

WAREHOUSES = """
pg: {type: postgres, host: db, user: ana, password: $env:PW, dbname: shop}
rs: {type: redshift, connection: {host: rs.example, user: ana, password: $env:PW, database: dev}}
snow:
  type: snowflake
  connection: {account: xy123, user: ana, password: $env:PW, role: analyst,
               database: analytics, warehouse: compute_wh, schema: marts}
bq:
  type: bigquery
  connection: {project: my-proj, dataset: marts, method: service-account,
               keyfile: /secrets/key.json, location: EU}
dbx:
  type: databricks
  connection: {host: dbc.example, http_path: /sql/1.0/warehouses/abc, token: $env:PW,
               database: main, schema: marts}
my: {type: mysql, connection: {host: db, user: ana, password: $env:PW, database: shop}}
trino:
  type: dbt_profile
  output: {type: trino, method: none, host: t.example, port: 8080, catalog: hive,
           schema: s, user: ana, session_properties: {query_max_run_time: 5m}}
"""

EXPECTED = {
    "pg": {"type": "postgres", "host": "db", "port": 5432, "user": "ana", "password": "s3cret",
           "dbname": "shop", "schema": "public"},
    "rs": {"type": "redshift", "host": "rs.example", "port": 5439, "user": "ana",
           "password": "s3cret", "dbname": "dev", "schema": "public"},
    "snow": {"type": "snowflake", "account": "xy123", "user": "ana", "password": "s3cret",
             "role": "analyst", "database": "analytics", "warehouse": "compute_wh",
             "schema": "marts"},
    "bq": {"type": "bigquery", "method": "service-account", "project": "my-proj",
           "schema": "marts", "keyfile": "/secrets/key.json", "location": "EU"},
    "dbx": {"type": "databricks", "host": "dbc.example", "http_path": "/sql/1.0/warehouses/abc",
            "token": "s3cret", "catalog": "main", "schema": "marts"},
    "my": {"type": "mysql", "port": 3306, "server": "db", "username": "ana", "password": "s3cret",
           "schema": "shop"},
    "trino": {"type": "trino", "method": "none", "host": "t.example", "port": 8080,
              "catalog": "hive", "schema": "s", "user": "ana",
              "session_properties": {"query_max_run_time": "5m"}},
}  # fmt: skip


def test_each_connection_type_renders_its_adapters_profile(tmp_path):
    file = tmp_path / "warehouses.yaml"
    file.write_text(WAREHOUSES)
    warehouses = load_warehouses(file, tmp_path / "unused.duckdb")
    resolver = Resolver(environ={"PW": "s3cret"})
    for name, expected in EXPECTED.items():
        out = render_output(warehouses[name], resolver)
        assert out == {**expected, "threads": 4}, name
        assert warehouses[name].adapter() == expected["type"]
        doc = yaml.safe_load(render_profiles("shop", "main", out))
        assert doc == {"shop": {"target": "main", "outputs": {"main": out}}}


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ("{type: snowflake, connection: {account: a, user: u}}", "database, warehouse, schema"),
        ("{type: mysql, connection: {server: db}}", "username (or user), schema (or database)"),
        ("{type: bigquery, connection: {dataset: d}}", "project (or database)"),
        ("{type: postgres, host: db}", "user, dbname (or database)"),
    ],
)
def test_a_connection_missing_a_key_is_refused_naming_it(tmp_path, body, missing):
    file = tmp_path / "warehouses.yaml"
    file.write_text(f"w: {body}\n")
    kind = yaml.safe_load(body)["type"]
    with pytest.raises(ValueError, match=re.escape(f"a {kind} connection needs {missing}")):
        load_warehouses(file, tmp_path / "unused.duckdb")

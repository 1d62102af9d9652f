"""A tiny dbt project whose `slow` model sleeps, so "another run is building" lasts long
enough to be seen, and the DuckDB warehouses that keep its copies' environments apart."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.gate import add_gate

__all__ = ["SLOW_MODEL", "duckdb_warehouses", "tiny_project"]

SLOW_MODEL = """
import time


def model(dbt, session):
    dbt.config(materialized="table")
    time.sleep(float(dbt.config.get("seconds")))
    return dbt.ref("orders")
"""


def tiny_project(
    folder: Path, seconds: float, warehouse: str | None = None, release: Path | None = None
) -> Path:
    """`orders` (SQL) and `slow` (sleeps `seconds`); with `release`, the gate model too."""
    (folder / "models" / "marts").mkdir(parents=True)
    (folder / "dbt_project.yml").write_text(
        'name: capa\nversion: "1.0.0"\nconfig-version: 2\nprofile: capa\n'
    )
    (folder / "models" / "orders.sql").write_text("select 1 as id\n")
    (folder / "models" / "slow.py").write_text(SLOW_MODEL)
    (folder / "models" / "slow.yml").write_text(
        f"models:\n  - name: slow\n    config:\n      seconds: {seconds}\n"
    )
    if warehouse:
        (folder / "jetdbt.yaml").write_text(f"profile:\n  warehouse: {warehouse}\n")
    if release:
        add_gate(folder, release)
    return folder


def duckdb_warehouses(folder: Path, names: list[str]) -> Path:
    """A warehouses file of one DuckDB file each: environments no two projects share."""
    found = folder / "warehouses.yaml"
    files = {n: {"type": "duckdb", "path": str(folder / f"{n}.duckdb")} for n in names}
    found.write_text(yaml.safe_dump({"warehouses": files}))
    return found

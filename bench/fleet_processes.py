"""The fleet benchmark's services as a deployment runs them: each `jetdbt serve ROLE` a process
of its own, as its own NATS user, against the benchmark's nats-server and Postgres.

Each child starts in a session of its own, so a Ctrl-C reaches the benchmark alone, which
stops its children in order (runners first) from a `finally`; a child that does not stop
within its grace after SIGTERM is killed. A runner's fork server and dbt children die with
it (their parent-death signal).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import proc_tree
from bench_scale import FORKSERVER

__all__ = ["Services"]

BIN = Path(sys.executable).parent
GRACE = 30.0  # seconds a service has to stop after SIGTERM
READY = 180.0  # seconds a service has to say it started


class Services:
    """The children this benchmark started, each with its log file."""

    def __init__(self, folder: Path, base_env: dict[str, str]):
        self.folder = folder
        self.base_env = base_env
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, role: str, env: dict[str, str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - the child's
        proc = subprocess.Popen(
            [str(BIN / "jetdbt"), "--log-level", "info", "serve", role],
            env={**self.base_env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    async def said(self, name: str, event: str) -> None:
        """Until the child `name` logged `event`; RuntimeError when it exits first."""
        log = self.folder / f"{name}.log"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY
        while f'"event": "{event}"' not in log.read_text(errors="replace"):
            if self.procs[name].poll() is not None or loop.time() > deadline:
                raise RuntimeError(f"{name} did not log {event}: see {log}")
            await asyncio.sleep(0.2)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def fork_server(self, name: str) -> int | None:
        """The fork server under runner `name`, once it started."""
        for pid in proc_tree.descendants(self.pid(name))[1:]:
            if FORKSERVER in proc_tree.cmdline(pid):
                return pid
        return None

    def stop(self, names: list[str]) -> None:
        """SIGTERM each of `names` at once, then wait; kill what outlives its grace."""
        procs = [self.procs.pop(n) for n in names if n in self.procs]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def stop_all(self) -> None:
        """Runners first (they publish), then whatever else is still running."""
        runners = [n for n in self.procs if n.startswith("runner")]
        self.stop(runners)
        self.stop(list(self.procs))

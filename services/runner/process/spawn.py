"""Starting dbt processes through this runner's warm fork servers (see forkserver.py).

One fork server for jetdbt's own environment, started on first use and kept for the
process's life (whatever event loops come and go), and one per engine environment in
use (services/runner/provision/environments.py), started on its first invocation and stopped once
it has been idle for the environment's idle time. Each dies with the runner, and every
child dies with its server. A child is addressed by pid: its own session makes
`killpg(pid)` reach everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from jetdbt.services.runner.process.dbt_env import sealed_environment

if TYPE_CHECKING:
    from jetdbt.services.runner.provision.environments import EngineEnvironment

__all__ = ["Child", "ForkServerLost", "spawn", "warm_up"]


class ForkServerLost(ConnectionError):
    """The warm dbt process died (killed for memory, say): the attempt is lost, not failed."""


class Child:
    def __init__(self, pid: int, exited: asyncio.Future):
        self.pid = pid
        self._exited = exited

    def kill(self) -> None:
        """The child's whole process group: dbt and anything it started."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    async def wait(self) -> int:
        """The exit code; negative for the signal that killed it."""
        return await asyncio.shield(self._exited)


class _Server:
    """The fork server process and a thread that hands its answers to waiting loops."""

    def __init__(self, environment: EngineEnvironment | None = None):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.last_used = time.monotonic()
        self.idle_seconds = environment.idle_seconds if environment else float("inf")
        # -P: the server's sys.path never holds a working directory, so no project
        # file is ever importable in the children it forks.
        self.process = subprocess.Popen(
            [
                environment.python if environment else sys.executable,
                "-P",
                "-m",
                "jetdbt.services.runner.process.forkserver",
                str(os.getpid()),
                str(theirs.fileno()),
                *([environment.adapter] if environment else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            cwd="/",
            # Only the allowlist: a child's /proc/self/environ shows what its process
            # started with, whatever it sets later, so the runner's credentials never
            # enter this process at all.
            env=sealed_environment(environment),
        )
        theirs.close()
        self.waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future, str]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="jetdbt-forkserver", daemon=True).start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def idle_for(self) -> float:
        """Seconds since it last started or ended a child; 0 while a child runs."""
        with self.lock:
            if self.waiting:
                return 0.0
        return time.monotonic() - self.last_used

    def expect(self, request_id: str, key: str) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.lock:
            self.waiting[f"{request_id}.{key}"] = (loop, future, key)
        return future

    def _read(self) -> None:
        while True:
            try:
                data = self.control.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            for key in ("pid", "error", "exit"):
                if key in message:
                    self._answer(f"{message['id']}.{'pid' if key == 'error' else key}", message)
        with self.lock:
            lost, self.waiting = self.waiting, {}
        for loop, future, _ in lost.values():
            _settle(loop, future, ForkServerLost("the warm dbt process exited"))

    def _answer(self, slot: str, message: dict) -> None:
        with self.lock:
            entry = self.waiting.pop(slot, None)
            self.last_used = time.monotonic()
        if entry is not None:
            loop, future, key = entry
            _settle(loop, future, message if key == "pid" else message["exit"])

    def stop(self) -> None:
        self.control.close()
        if self.alive():
            self.process.kill()
        self.process.wait()


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future, value) -> None:
    def settle() -> None:
        if future.done():
            return
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
        loop.call_soon_threadsafe(settle)


_PR_SET_DUMPABLE = 4
_server: _Server | None = None
_engines: dict[str, _Server] = {}  # an engine environment's folder: its fork server
_guard = threading.Lock()
_ids = itertools.count(1)


def _not_dumpable() -> None:
    """Other processes of this user (a dbt child among them) cannot read this one's
    memory or /proc/<pid>/environ; running runners as a user of their own does the rest."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0)


def _current(environment: EngineEnvironment | None = None) -> _Server:
    """The running fork server of `environment` (None: jetdbt's own), started (again) when
    there is none; an engine environment's server idle past its time is stopped.

    Start it from a long-lived thread (the event loop's): the server is killed
    when the thread that started it ends, which is how it dies with its runner.
    """
    global _server
    with _guard:
        if _server is None and not _engines:
            _not_dumpable()
        _stop_idle(environment)
        if environment is not None:
            server = _engines.get(environment.root)
            if server is None or not server.alive():
                if server is not None:
                    server.stop()
                server = _engines[environment.root] = _Server(environment)
            server.last_used = time.monotonic()
            server.idle_seconds = environment.idle_seconds  # the setting as it is now
            return server
        if _server is None or not _server.alive():
            if _server is not None:
                _server.stop()
            _server = _Server()
        return _server


def _stop_idle(using: EngineEnvironment | None) -> None:
    """Engine environments' servers with no child for their idle time, but the one in use."""
    for root, server in list(_engines.items()):
        if (using is None or root != using.root) and server.idle_for() > server.idle_seconds:
            server.stop()
            del _engines[root]


def warm_up() -> None:
    """Start the fork server now, so the first invocation does not wait for dbt's imports."""
    _current()


async def spawn(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    out_fd: int,
    *,
    exec_: list[str] | None = None,
    keep: list[str] = (),
    events_fd: int | None = None,
    events: tuple[str, ...] = (),
    sandbox: dict | None = None,
    environment: EngineEnvironment | None = None,
) -> Child:
    """A sealed child running `dbt <argv>` (or the binary `exec_`), its output on `out_fd`
    and, with `events_fd`, the dbt events named in `events` as JSON lines there; of dbt's
    flag variables in `env`, only those named in `keep` reach it; `sandbox` is what the child
    contains itself in (services/runner/process/containment.py), None to run it uncontained;
    `environment` the engine environment whose warm dbt forks it (None: jetdbt's own)."""
    server = _current(environment)
    request_id = str(next(_ids))
    started = server.expect(request_id, "pid")
    exited = server.expect(request_id, "exit")
    request = {
        "id": request_id,
        "argv": argv,
        "cwd": cwd,
        # The egress gate's proxy in place of the operator's, whose login never reaches a
        # sandboxed child, not even in the request it reads.
        "env": env | (sandbox or {}).get("env", {}),
        "exec": exec_,
        "keep": list(keep),
        "events": list(events),
        "sandbox": sandbox,
    }
    fds = [out_fd] if events_fd is None else [out_fd, events_fd]
    socket.send_fds(server.control, [json.dumps(request).encode()], fds)
    message = await started
    if "error" in message:
        exited.cancel()
        raise RuntimeError(f"the warm dbt process refused the invocation: {message['error']}")
    return Child(message["pid"], exited)

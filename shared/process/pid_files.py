"""Servers named by their pid files: signalled or stopped only while the pid is still that
program (a pid reused by another process is left alone)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = ["cmdline", "signal_server", "stop_left_behind"]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def signal_server(pid_file: Path, program: bytes, sig: int) -> bool:
    """Send `sig` to the server whose pid `pid_file` holds, only while that pid is still
    `program`; False when it is not running."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    if program not in cmdline(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_left_behind(pid_file: Path, program: bytes, data_dir: Path) -> bool:
    """A server an earlier `jetdbt up` left on `data_dir` (it was SIGKILLed, the laptop
    crashed) still holds its data, and nothing would ever stop it: stop it first. The pid
    file's first line is its pid; a pid reused by another program is left alone. True
    when one was stopped."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    running = cmdline(pid)
    if program not in running or str(data_dir).encode() not in running:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and cmdline(pid) == running:
            time.sleep(0.05)
        if cmdline(pid) == running:  # still that server, not a pid reused since
            os.kill(pid, signal.SIGKILL)
    return True

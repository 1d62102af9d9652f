"""What a process tree costs, read from Linux's /proc: CPU seconds and peak memory.

The benchmarks measure jetdbt as a person runs it: `jetdbt up` is a tree of processes
(nats-server, Postgres and its backends, the runner's fork server and the dbt children
it forks), so its cost is the tree's, read here without a library.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["descendants", "cpu_seconds", "peak_rss_mb", "reset_peak", "cmdline"]

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def descendants(root: int) -> list[int]:
    """`root` and every live process under it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User and system time of `pids`, their reaped children's included."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:  # utime, stime, cutime, cstime
            total += sum(int(f) for f in fields[11:15])
    return total / _TICK


def peak_rss_mb(pid: int) -> float:
    """The peak resident set size of `pid` (VmHWM) since it started or was reset; 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_peak(pid: int) -> None:
    """Start `pid`'s VmHWM again from its current size (clear_refs 5)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""

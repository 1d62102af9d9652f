"""RUN_MEMORY, RUN_CPUS and RUN_PIDS for one dbt invocation: a cgroup of its own, made
before it starts.

The runner makes a cgroup per invocation under its own (cgroup v1's memory, cpu and pids
hierarchies, or a v2 group with the three controllers), writes the caps, and the child
joins it before it forks anything, so everything the invocation starts is counted. After
the child exits the runner reads whether the kernel killed it for memory or refused it a
process, and removes the group (killing anything left in it first).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Caps", "CgroupUnavailable", "Group", "Hierarchy", "find"]

_PERIOD_US = 100_000
_PARENT = "jetdbt"
STALE_SECONDS = 300.0


_CONTROLLERS = ("memory", "cpu", "pids")


class CgroupUnavailable(RuntimeError):
    """No writable memory, cpu and pids cgroup: the message says what is missing."""


@dataclass(frozen=True)
class Caps:
    memory: int  # bytes
    cpus: float
    pids: int  # processes and threads


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, right = line.split(" - ", 1)
            fstype, _, options = right.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, set(options.split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    paths = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


@dataclass(frozen=True)
class Hierarchy:
    """Where this runner makes its invocations' groups: v1 has one folder per controller."""

    version: int
    memory: Path
    cpu: Path
    pids: Path

    def describe(self) -> str:
        if self.version == 2:
            return f"cgroup v2 memory+cpu+pids under {self.memory}"
        return f"cgroup v1 memory under {self.memory}, cpu under {self.cpu}, pids under {self.pids}"

    def group(self, name: str, caps: Caps) -> Group:
        """A new group `name` with `caps` written; the child joins it by its procs files."""
        for folder in self.named(name).folders:
            folder.mkdir()
        group = self.named(name)
        try:
            group.limit(caps)
        except OSError:
            group.remove()
            raise
        return group

    def named(self, name: str) -> Group:
        return Group(self, self.memory / name, self.cpu / name, self.pids / name)

    def sweep(self, older_than: float = STALE_SECONDS) -> None:
        """Remove the empty groups an invocation left (a runner stopped mid-run): only
        those older than a fresh group's wait for its child, never one in use."""
        now = time.time()
        for parent in {self.memory, self.cpu, self.pids}:
            for folder in parent.iterdir():
                try:
                    if not folder.is_dir() or now - folder.stat().st_mtime < older_than:
                        continue
                    if not (folder / "cgroup.procs").read_text().strip():
                        folder.rmdir()
                except OSError:
                    continue


def find(delegated: Path | None = None) -> Hierarchy:
    """The hierarchy this runner may write, its parent folders made; CgroupUnavailable
    naming what is missing when there is none. `delegated` is an operator's v2 group."""
    if delegated is not None:
        return _v2(delegated)
    own = _own_paths()
    v1 = {}
    v2_mount = None
    for point, fstype, options in _mounts():
        if fstype == "cgroup2":
            v2_mount = point
            continue
        for controller in _CONTROLLERS:
            if controller in options and controller in own:
                v1[controller] = Path(point) / own[controller].lstrip("/") / _PARENT
    if len(v1) == len(_CONTROLLERS):
        for folder in v1.values():
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise CgroupUnavailable(f"cannot create {folder}: {exc.strerror}") from None
        return Hierarchy(1, v1["memory"], v1["cpu"], v1["pids"])
    if v2_mount is not None and "" in own:
        return _v2(Path(v2_mount) / own[""].lstrip("/"))
    raise CgroupUnavailable(
        "no cgroup hierarchy with the memory, cpu and pids controllers is mounted"
    )


def _v2(base: Path) -> Hierarchy:
    """cgroup v2: `base` must offer memory, cpu and pids to a child of its own, which needs
    it to hold no process itself (the kernel's rule): an operator delegates one
    (JETDBT_CGROUP)."""
    try:
        offered = (base / "cgroup.controllers").read_text().split()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read {base}/cgroup.controllers: {exc.strerror}") from None
    missing = [c for c in _CONTROLLERS if c not in offered]
    if missing:
        raise CgroupUnavailable(f"cgroup v2 at {base} does not offer {', '.join(missing)}")
    parent = base / _PARENT
    enable = " ".join(f"+{c}" for c in _CONTROLLERS)
    try:
        (base / "cgroup.subtree_control").write_text(enable)
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text(enable)
    except OSError as exc:
        raise CgroupUnavailable(
            f"cannot enable memory, cpu and pids below {base} ({exc.strerror}): give the"
            " runner a cgroup of its own that holds no process (JETDBT_CGROUP)"
        ) from None
    return Hierarchy(2, parent, parent, parent)


@dataclass(frozen=True)
class Group:
    hierarchy: Hierarchy
    memory: Path
    cpu: Path
    pids: Path

    @property
    def folders(self) -> list[Path]:
        """One per controller in v1, the one group in v2."""
        return sorted({self.memory, self.cpu, self.pids})

    @property
    def procs(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def limit(self, caps: Caps) -> None:
        quota = max(1000, int(caps.cpus * _PERIOD_US))
        (self.pids / "pids.max").write_text(str(caps.pids))
        if self.hierarchy.version == 2:
            (self.memory / "memory.max").write_text(str(caps.memory))
            with contextlib.suppress(OSError):  # no swap configured: nothing to cap
                (self.memory / "memory.swap.max").write_text("0")
            (self.memory / "memory.oom.group").write_text("1")
            (self.cpu / "cpu.max").write_text(f"{quota} {_PERIOD_US}")
            return
        (self.memory / "memory.limit_in_bytes").write_text(str(caps.memory))
        with contextlib.suppress(OSError):  # swap accounting off: nothing to cap
            (self.memory / "memory.memsw.limit_in_bytes").write_text(str(caps.memory))
        (self.cpu / "cpu.cfs_period_us").write_text(str(_PERIOD_US))
        (self.cpu / "cpu.cfs_quota_us").write_text(str(quota))

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this group for its memory cap."""
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        return _counted(self.memory / name, "oom_kill")

    def pids_refused(self) -> bool:
        """Whether the kernel refused a process or thread of this group for its pids cap."""
        return _counted(self.pids / "pids.events", "max")

    def remove(self) -> None:
        """Kill what is left in the group, then remove it (the kernel frees it lazily)."""
        for folder in self.folders:
            for _ in range(50):
                try:
                    pids = (folder / "cgroup.procs").read_text().split()
                except OSError:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), 9)
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _counted(events: Path, key: str) -> bool:
    """Whether counter `key` of a cgroup's events file is above zero."""
    try:
        text = events.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip() != "0":
            return True
    return False

"""RUN_DISK: what one job folder may hold.

A root runner gives each job folder a filesystem of its own, RUN_DISK big: a sparse file in
the runner's cache (the host's disk holds only what is written), formatted ext4 and
loop-mounted (nosuid, nodev) on the folder before the job's files are written, so a write
past it fails with "No space left on device". The folder stays mounted, and readable, until
the job is removed (artifacts and logs are read after dbt ends); then it is unmounted (the
loop device goes with it) and the file removed. The runner holds a lock on the file while
the job lives: a runner that was killed leaves it unlocked, and the next start sweeps it.

Where the runner cannot mount (not root, no loop device, no mkfs.ext4), the job folder is
measured while each invocation runs and the invocation is killed past RUN_DISK instead;
describe() says which is in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.supervise import to_the_end

__all__ = ["DiskBound", "DiskUnavailable", "Mounted", "mounted", "used"]

_MNT_DETACH = 2
# A job folder with less than this free is full: a write that failed left less.
_FULL_BELOW = 1 << 20
# Watching: the folder is measured at most this often, and never more than 5% of the time.
WATCH_EVERY = 1.0
# A half-made image (a runner killed before it was locked) is swept only this old.
_STALE_SECONDS = 60.0
_TOOL_TIMEOUT = 60
_libc = ctypes.CDLL(None, use_errno=True)
_log = jlog.get("sandbox")


class DiskUnavailable(RuntimeError):
    """This runner cannot give a job folder a filesystem of its own: the message says why."""


class Mounted:
    """One job folder's own filesystem, locked by this runner until it is detached."""

    def __init__(self, root: Path, image: Path, lock: int):
        self.root, self.image, self._lock = root, image, lock

    def detach(self) -> None:
        """Unmount (lazily: a process still dying in it keeps it until it ends; the loop
        device is freed with the last of it), then remove the file."""
        if self._lock < 0:
            return
        _unmount(self.root)
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        os.close(self._lock)
        self._lock = -1


class DiskBound:
    """How this runner bounds its job folders: `mount` (a filesystem each) or `watch`."""

    def __init__(self, size: int, cache: Path):
        self.size = size
        self.jobs, self.images = cache / "jobs", cache / "disks"
        self.mode: str | None = None  # None until probed
        self.why_watched = ""
        self._tools: dict[str, str] = {}

    def describe(self) -> str:
        if self.mode == "mount":
            return "each job folder a filesystem of its own"
        if self.mode is None:
            return "not checked yet"
        return (
            "each job folder measured while dbt runs, dbt killed past it"
            f" (no filesystem of its own: {self.why_watched})"
        )

    def probe(self, folder: Path) -> Mounted | None:
        """Sweep what a killed runner left, then mount a job folder's filesystem on `folder`
        to learn whether this runner can; the mode says. The caller detaches it."""
        self.sweep()
        tools = {name: shutil.which(name) for name in ("mkfs.ext4", "mount")}
        missing = [name for name, path in tools.items() if path is None]
        if os.geteuid() != 0:
            self.mode, self.why_watched = "watch", "the runner is not root"
        elif missing:
            self.mode, self.why_watched = "watch", f"no {' or '.join(missing)} on this machine"
        else:
            self._tools = tools
            try:
                mounted = self._mount(folder)
            except DiskUnavailable as exc:
                self.mode, self.why_watched = "watch", str(exc)
            else:
                self.mode = "mount"
                return mounted
        _log.warning("run_disk_watched", reason=self.why_watched)
        return None

    def attach(self, root: Path) -> Mounted | None:
        """Job folder `root` made, with a filesystem of its own when this runner mounts."""
        if self.mode != "mount":
            root.mkdir(parents=True, exist_ok=True)
            return None
        return self._mount(root)

    def _mount(self, root: Path) -> Mounted:
        root.mkdir(parents=True, exist_ok=True)
        self.images.mkdir(parents=True, exist_ok=True)
        # Locked before it has its name, so a sweep never takes an image being made.
        staging = self.images / f".{uuid.uuid4().hex}.img"
        lock = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        image = self.images / f"{root.name}.img"
        try:
            os.ftruncate(lock, self.size)
            os.rename(staging, image)
            _tool([self._tools["mkfs.ext4"], "-q", "-F", "-m", "0", "-O", "^has_journal",
                   "-E", "nodiscard", str(image)])  # fmt: skip
            _tool([self._tools["mount"], "-t", "ext4", "-o", "loop,nosuid,nodev",
                   str(image), str(root)])  # fmt: skip
        except BaseException:
            for path in (staging, image):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            os.close(lock)
            raise
        with contextlib.suppress(OSError):
            (root / "lost+found").rmdir()  # the job's tree holds only the job's files
        return Mounted(root, image, lock)

    def sweep(self) -> None:
        """Unmount and remove the job filesystems no runner holds (their runner was killed),
        and their job folders."""
        if not self.images.is_dir():
            return
        for image in self.images.iterdir():
            made = image.name.startswith(".")
            try:
                if made and time.time() - image.stat().st_mtime < _STALE_SECONDS:
                    continue
                lock = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(lock)
                continue  # a live runner's job
            if not made:
                root = self.jobs / image.name.removesuffix(".img")
                _unmount(root)
                shutil.rmtree(root, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                image.unlink()
            os.close(lock)
            _log.info("run_disk_swept", image=image.name)

    def full(self, root: Path) -> bool:
        """Whether job folder `root` reached RUN_DISK."""
        if self.mode != "mount":
            return used(root) > self.size
        try:
            fs = os.statvfs(root)
        except OSError:
            return False
        return fs.f_bavail * fs.f_frsize < _FULL_BELOW or fs.f_favail == 0

    async def watch(self, root: Path) -> None:
        """Return once job folder `root` holds more than RUN_DISK (where it is not a
        filesystem of its own, which cannot)."""
        while True:
            started = time.monotonic()
            if await asyncio.to_thread(used, root) > self.size:
                return
            await asyncio.sleep(max(WATCH_EVERY, 20 * (time.monotonic() - started)))


def used(root: Path) -> int:
    """Bytes of disk the files under `root` take (links not followed)."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def _unmount(root: Path) -> None:
    if _libc.umount2(str(root).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not mounted, or no folder
            _log.warning("run_disk_not_unmounted", folder=str(root), error=os.strerror(err))


def _tool(argv: list[str]) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT, env={"LC_ALL": "C"}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskUnavailable(f"{Path(argv[0]).name} failed: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        raise DiskUnavailable(f"{Path(argv[0]).name} failed: {said[-1]}")


async def mounted(mount, folder: Path) -> Mounted | None:
    """`mount(folder)` (DiskBound.attach or .probe) in a thread. A cancel while it mounts (a
    stack stopping) waits for the mount and undoes it: a mount nobody holds would outlive
    the runner."""
    mounting = asyncio.ensure_future(asyncio.to_thread(mount, folder))
    try:
        return await to_the_end(mounting)
    except asyncio.CancelledError:
        done = None if mounting.exception() else mounting.result()
        if done is not None:
            done.detach()
        raise

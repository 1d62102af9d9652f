"""RUN_DISK's job folders (services/runner/process/job_disk.py): a filesystem of their own
that nothing outlives, swept after a runner is killed, and watched where none can be made."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jetdbt.services.runner.process.containment import BoundExceeded, Containment, JobSandbox
from jetdbt.services.runner.process.job_disk import DiskBound
from jetdbt.shared.process.config import load

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("mkfs.ext4"), reason="needs root and mkfs.ext4"
)
MB = 1 << 20


def _mounted(folder: Path) -> bool:
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == str(folder) for line in fh)


def _loop_files() -> list[str]:
    """What every loop device of the machine is backed by."""
    return [p.read_text().strip() for p in Path("/sys/block").glob("loop*/loop/backing_file")]


def _settled(check, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _bound(cache: Path, size: int) -> DiskBound:
    disk = DiskBound(size, cache)
    probe = cache / "jobs" / "probe"
    mounted = disk.probe(probe)
    assert disk.mode == "mount", disk.describe()
    mounted.detach()
    probe.rmdir()
    return disk


@needs_root
def test_a_job_folder_holds_no_more_than_run_disk_and_leaves_nothing_behind(tmp_path):
    disk = _bound(tmp_path, 32 * MB)
    root = tmp_path / "jobs" / "a-job"
    mounted = disk.attach(root)
    assert _mounted(root) and os.listdir(root) == []
    assert not disk.full(root)
    with pytest.raises(OSError) as refused, open(root / "big", "wb") as fh:
        for _ in range(64):
            fh.write(b"x" * MB)
            fh.flush()
    assert refused.value.errno == errno.ENOSPC
    assert disk.full(root)
    assert os.stat(mounted.image).st_blocks * 512 < 40 * MB  # the host holds what was written

    mounted.detach()
    shutil.rmtree(root)
    assert not _mounted(root) and list(disk.images.iterdir()) == []
    assert _settled(lambda: not [f for f in _loop_files() if str(tmp_path) in f]), _loop_files()


@needs_root
def test_a_killed_runners_job_folders_are_swept_when_the_next_one_starts(tmp_path):
    live = _bound(tmp_path, 16 * MB)
    held = tmp_path / "jobs" / "live-job"
    holding = live.attach(held)
    killed = tmp_path / "jobs" / "killed-job"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from jetdbt.services.runner.process.job_disk import DiskBound\n"
        f"disk = DiskBound({16 * MB}, Path({str(tmp_path)!r}))\n"
        f"disk.probe(Path({str(tmp_path / 'probe')!r})).detach()\n"
        f"disk.attach(Path({str(killed)!r}))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert runner.stdout.readline().strip() == "ready"
    finally:
        runner.kill()
        runner.wait()
    assert _mounted(killed)

    _bound(tmp_path, 16 * MB)  # the next runner's start
    assert not _mounted(killed) and not killed.exists()
    try:
        assert _mounted(held), "a live runner's job folder was swept"
        assert [p.name for p in live.images.iterdir()] == ["live-job.img"]
    finally:
        holding.detach()
    assert _settled(lambda: not [f for f in _loop_files() if "killed-job" in f]), _loop_files()


def test_where_the_runner_cannot_mount_an_invocation_filling_its_job_folder_is_stopped(tmp_path):
    containment = Containment(load({"JETDBT_HOME": str(tmp_path), "RUN_DISK": "16m"}))
    disk = containment.disk
    disk.mode, disk.why_watched = "watch", "the runner is not root"
    root = tmp_path / "jobs" / "a-job"
    assert disk.attach(root) is None and root.is_dir()
    assert "measured while dbt runs" in disk.describe() and "not root" in disk.describe()
    ended = []

    async def invocation() -> int:
        """Stands in for dbt: writes a megabyte every 10 ms, forever."""
        try:
            with open(root / "big", "wb") as fh:
                while True:
                    fh.write(b"x" * MB)
                    fh.flush()
                    await asyncio.sleep(0.01)
        finally:
            ended.append(time.monotonic())

    async def fill() -> float:
        started = time.monotonic()
        with pytest.raises(BoundExceeded, match="the job folder is full: RUN_DISK=16m"):
            await JobSandbox(containment, root, None).watched(invocation())
        return time.monotonic() - started

    assert asyncio.run(fill()) < 3 and ended, "the invocation was not stopped"
    assert disk.full(root)

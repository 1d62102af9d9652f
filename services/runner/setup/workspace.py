"""A job's own directory: the deployed bundle materialised, plus its rendered profiles.yml.

It is a filesystem of its own, RUN_DISK big, where the runner mounts one (job_disk.py),
made before any of the job's files are written.

Its packages are linked in afterwards (services/runner/provision/packages.py), once the plan says
where dbt looks for them.

Bundles are unpacked once per runner into a cache keyed by their digest (the
version is content-addressed, so a cached copy can never be stale), then copied
into a fresh job directory per attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import uuid
from pathlib import Path

from services.runner.process.job_disk import DiskBound, Mounted
from shared import bundle
from shared.bus import Bus
from shared.digests import check_digest

__all__ = ["Job", "job_root", "prepare"]


class Job:
    def __init__(self, root: Path, disk: Mounted | None = None):
        self.root = root
        self.disk = disk
        self.project = root / "project"
        self.profiles = root / "profiles"

    def files(self) -> list[str]:
        """The project's files as materialised, before dbt adds anything."""
        return sorted(
            p.relative_to(self.project).as_posix() for p in self.project.rglob("*") if p.is_file()
        )

    def cleanup(self) -> None:
        if self.disk is not None:
            self.disk.detach()
        shutil.rmtree(self.root, ignore_errors=True)


async def _cached_bundle(bus: Bus, cache: Path, digest: str) -> Path:
    target = cache / "bundles" / digest.replace(":", "-")
    if target.exists():
        return target
    data = await bus.get_blob(digest)
    staging = target.with_name(f"{target.name}.{uuid.uuid4().hex}")
    bundle.unpack(data, staging)
    try:
        staging.rename(target)
    except OSError:  # another attempt won the race; its copy is identical
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _check(what: str, digest: str) -> None:
    try:
        check_digest(digest)
    except ValueError as exc:
        raise bundle.BundleRefused(f"<{what}>", str(exc)) from None


async def _attached(disk: DiskBound, root: Path) -> Mounted | None:
    """`root`'s own filesystem. A cancel while the thread mounts it (a stack stopping) waits
    for the mount and undoes it: a mount nobody holds would outlive the runner."""
    attaching = asyncio.ensure_future(asyncio.to_thread(disk.attach, root))
    try:
        return await asyncio.shield(attaching)
    except asyncio.CancelledError:
        mounted = await attaching
        if mounted is not None:
            mounted.detach()
        raise


def job_root(cache: Path, name: str) -> Path:
    """Job `name`'s folder. Every job path has the same length (a digest of the name; the
    name is written inside), so dbt's partial-parse file, which holds its job's absolute
    paths, moves to another job by swapping one path for another of the same length."""
    return cache / "jobs" / hashlib.sha256(name.encode()).hexdigest()[:32]


async def prepare(
    bus: Bus, cache: Path, version: str, name: str, disk: DiskBound | None = None
) -> Job:
    """A fresh job directory holding `version`'s files, bounded by `disk` (None: unbounded,
    the sandbox off).

    Raises bundle.BundleRefused, naming it, for a digest that is not one: a digest
    becomes a cache path, so it is checked before any path is built from it.
    """
    _check("version", version)
    job = Job(job_root(cache, name))
    job.cleanup()
    if disk is not None:
        job.disk = await _attached(disk, job.root)
    try:
        job.profiles.mkdir(parents=True)
        (job.root / "name").write_text(name)
        shutil.copytree(await _cached_bundle(bus, cache, version), job.project)
    except BaseException:
        job.cleanup()
        raise
    return job

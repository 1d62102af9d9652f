"""A job's own directory: the deployed bundle materialised, plus its rendered profiles.yml.

It is a filesystem of its own, RUN_DISK big, where the runner mounts one (job_disk.py),
made before any of the job's files are written.

Its packages are linked in afterwards (services/runner/provision/packages.py), once the plan says
where dbt looks for them.

Bundles are kept unpacked per runner in a cache keyed by their digest (the version is
content-addressed, so a cached copy can never be stale) and copied into a fresh job
directory per attempt. A version's first job (its deploy) unpacks the bundle straight into
its directory and fills the cache beside it, off the job's path: at 5,000 models each
pass writes 5,000 files. The files are written in threads, so the runner's loop goes on
publishing other runs' events meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import uuid
from pathlib import Path

from jetdbt.services.runner.process import job_disk
from jetdbt.services.runner.process.job_disk import DiskBound, Mounted
from jetdbt.shared.blobs.digests import check_digest
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.supervise import to_the_end
from jetdbt.shared.project import bundle

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


_filling: set[asyncio.Task] = set()  # cache fills under way, held until they end
log = jlog.get("workspace")


def _cached(cache: Path, digest: str) -> Path:
    return cache / "bundles" / digest.replace(":", "-")


def _fill_cache(data: bytes, target: Path) -> None:
    """Unpacked beside, then renamed into place whole: a cache never holds half a bundle.
    A fill that fails costs only the next job's copy (it unpacks the bundle again)."""
    staging = target.with_name(f"{target.name}.{uuid.uuid4().hex}")
    try:
        bundle.unpack(data, staging)
        staging.rename(target)
    except Exception as exc:  # another job filled it first (ENOTEMPTY), a full disk, ...
        shutil.rmtree(staging, ignore_errors=True)
        if not target.exists():
            log.warning("bundle_cache_not_filled", bundle=target.name, error=repr(exc))


async def _materialise(bus: Bus, cache: Path, version: str, dest: Path) -> None:
    """`version`'s files into `dest`: from the cache, or from the bundle (filling the cache)."""
    cached = _cached(cache, version)
    if cached.exists():
        await to_the_end(asyncio.to_thread(shutil.copytree, cached, dest))
        return
    data = await bus.get_blob(version)
    await to_the_end(asyncio.to_thread(bundle.unpack, data, dest))
    filling = asyncio.create_task(asyncio.to_thread(_fill_cache, data, cached))
    _filling.add(filling)
    filling.add_done_callback(_filling.discard)


async def settled() -> None:
    """Wait for the cache fills this loop started (a runner stopping, a test)."""
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(t for t in list(_filling) if t.get_loop() is loop))


def _check(what: str, digest: str) -> None:
    try:
        check_digest(digest)
    except ValueError as exc:
        raise bundle.BundleRefused(f"<{what}>", str(exc)) from None


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
        job.disk = await job_disk.mounted(disk.attach, job.root)
    try:
        job.profiles.mkdir(parents=True)
        (job.root / "name").write_text(name)
        await _materialise(bus, cache, version, job.project)
    except BaseException:
        job.cleanup()
        raise
    return job

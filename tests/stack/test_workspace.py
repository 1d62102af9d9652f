"""A job's folder from a deployed bundle (services/runner/setup/workspace.py), against a real
nats-server: a version's first job unpacks the bundle straight into its folder and fills the
runner's cache beside it; a later job copies from the cache, without the object store."""

from __future__ import annotations

import asyncio
import time

import pytest
from jetdbt.services.runner.setup import workspace
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import BLOBS
from jetdbt.shared.process.supervise import to_the_end
from jetdbt.shared.project import bundle

FILES = {"dbt_project.yml": b"name: p\n", "models/a.sql": b"select 1\n", "seeds/s.csv": b"id\n1\n"}


async def test_a_first_job_unpacks_the_bundle_and_a_later_one_copies_the_cache(nats_url, tmp_path):
    source = tmp_path / "source"
    for rel, data in FILES.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_bytes(data)
    packed = bundle.pack(source)
    bus = await connect(nats_url, "test")
    try:
        version = await bus.put_blob(packed.data)
        first = await workspace.prepare(bus, tmp_path / "cache", version, "deploy-1")
        assert first.files() == sorted(FILES)
        await workspace.settled()  # the cache is filled beside the job
        cached = tmp_path / "cache" / "bundles" / version.replace(":", "-")
        assert sorted(p.name for p in cached.rglob("*") if p.is_file()) == ["a.sql",
            "dbt_project.yml", "s.csv"]  # fmt: skip
        assert not [p for p in cached.parent.iterdir() if p != cached]  # no staging left
        await (await bus.js.object_store(BLOBS)).delete(version)
        later = await workspace.prepare(bus, tmp_path / "cache", version, "run-1")
        assert {rel: (later.project / rel).read_bytes() for rel in FILES} == FILES
        first.cleanup()
        later.cleanup()
    finally:
        await bus.close()


async def test_a_job_cancelled_twice_returns_only_once_its_files_are_written():
    """The job's folder is removed after `to_the_end` returns: a second cancel (a person's,
    then the stack stopping) must not let that happen while the thread still writes."""
    written = []

    def write() -> None:
        time.sleep(0.3)
        written.append("done")

    task = asyncio.create_task(to_the_end(asyncio.to_thread(write)))
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert written == ["done"]

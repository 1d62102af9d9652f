"""Retention: the newest RUN_RETENTION finished runs of a project and environment keep
their files (kept log, run_results, manifest); older runs lose them, except the run
whose state the environment publishes and the run a retry would resume.

Which runs those are is an index per project and environment in the DBT_RETENTION
bucket, oldest first, changed only by compare-and-set, so runner replicas never lose
each other's entries; runners never read Postgres. A pruned run's files are named in
`run.pruned` before they are deleted (a replay folds the same), and a file that any
other indexed run or any deployed version names is left where it is: blobs are
content-addressed and may be shared. Every step is idempotent: a runner that dies
mid-way leaves the run in the index, and the next run of the environment finishes it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable

import msgspec
from jetdbt.services.runner.after.kept_log import EndedRun
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import kv_keys, subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.stream_batches import Slice
from jetdbt.shared.bus.streams import BLOBS, EVENTS, LOGS, RETENTION
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.project.environments import Environment
from nats.js.errors import (
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)

__all__ = ["Kept", "Index", "after_run", "index_key", "record_and_prune"]

# Compare-and-set tries before giving up (another replica changing the same index).
_TRIES = 20


class Kept(msgspec.Struct, frozen=True, kw_only=True):
    """A finished run in the index, and the files it names."""

    run_id: str
    principal: str = ""
    objects: list[str] = []


class Index(msgspec.Struct, frozen=True, kw_only=True):
    """The finished runs of one project and environment that still have their files."""

    project: str
    scope: str
    runs: list[Kept] = []  # oldest first


def index_key(project: str, scope: str) -> str:
    """A KV key for (project, environment); any text becomes a valid key."""
    return "idx-" + hashlib.sha256(f"{project}\n{scope}".encode()).hexdigest()[:40]


async def _change(kv, key: str, change: Callable[[Index | None], Index]) -> Index:
    """Apply `change` to the stored index by compare-and-set, again when another won."""
    for _ in range(_TRIES):
        try:
            entry = await kv.get(key)
            current, revision = msgspec.json.decode(entry.value, type=Index), entry.revision
        except KeyNotFoundError:
            current, revision = None, None
        changed = change(current)
        try:
            if revision is None:
                await kv.create(key, msgspec.json.encode(changed))
            else:
                await kv.update(key, msgspec.json.encode(changed), last=revision)
            return changed
        except KeyWrongLastSequenceError:
            continue
    raise RuntimeError(f"the retention index {key} kept changing under {_TRIES} tries")


async def _pinned(
    bus: Bus, project: str, environment: Environment | None, old: list[Kept]
) -> set[str]:
    """Runs that keep their files however old: the one whose state the environment
    publishes (deferral reads its files) and, per principal, the one a retry resumes."""
    pinned = set()
    if environment is not None:
        state = await bus.last_event(subjects.state_event(project, environment.key(), "published"))
        if isinstance(state, ev.StatePublished):
            pinned.add(state.run_id)
    for principal in {k.principal for k in old}:
        saved = await bus.last_event(subjects.retry_event(project, principal, "saved"))
        if isinstance(saved, ev.RetryStateSaved):
            pinned.add(saved.run_id)
    return pinned


async def _in_use(bus: Bus, kv, leaving: set[str]) -> set[str]:
    """Every file a run still in any index names (other than the runs `leaving`), and every
    blob a deployed version names: none of those may be deleted."""
    used: set[str] = set()
    for key in await kv_keys.keys(bus, RETENTION):
        with contextlib.suppress(KeyNotFoundError):
            index = msgspec.json.decode((await kv.get(key)).value, type=Index)
            for kept in index.runs:
                if kept.run_id not in leaving:
                    used.update(kept.objects)
    async with Slice(bus.js, EVENTS, subjects.deployed_of_any_project()) as deploys:
        async for batch in deploys:
            for _, msg in batch:
                with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                    d = ev.decode(msg.data)
                    if isinstance(d, ev.Deployed):
                        used.update((d.version, d.manifest_digest, d.packages_digest or ""))
    return used


async def record_and_prune(
    bus: Bus,
    keep: int,
    *,
    project: str,
    scope: str,
    environment: Environment | None,
    run: Kept,
) -> list[str]:
    """Record `run` as the newest finished run of (project, scope), then remove the files
    of the runs past the newest `keep`; returns the run ids pruned."""
    kv = await bus.js.key_value(RETENTION)
    key = index_key(project, scope)

    def add(index: Index | None) -> Index:
        runs = [k for k in (index.runs if index else []) if k.run_id != run.run_id]
        return Index(project=project, scope=scope, runs=[*runs, run])

    index = await _change(kv, key, add)
    old = index.runs[:-keep]
    if not old:
        return []
    pinned = await _pinned(bus, project, environment, old)
    doomed = [k for k in old if k.run_id not in pinned]
    if not doomed:
        return []
    leaving = {k.run_id for k in doomed}
    used = await _in_use(bus, kv, leaving)
    store = await bus.js.object_store(BLOBS)
    for kept in doomed:
        gone = [o for o in kept.objects if o not in used]
        await bus.publish(
            ev.RunPruned(
                project=project,
                run_id=kept.run_id,
                objects=gone,
                kept=[o for o in kept.objects if o in used],
            )
        )
        # Its lines go too: a pruned run's log is gone from the stream and the object.
        with contextlib.suppress(NotFoundError):
            await bus.js.purge_stream(LOGS, subject=subjects.run_log(kept.run_id))
        for name in gone:
            with contextlib.suppress(NotFoundError):
                await store.delete(name)
        jlog.get("retention", project=project, run_id=kept.run_id).info(
            "run_files_pruned", objects=len(gone), shared=len(kept.objects) - len(gone)
        )

    def remove(index: Index | None) -> Index:
        runs = [k for k in (index.runs if index else []) if k.run_id not in leaving]
        return Index(project=project, scope=scope, runs=runs)

    await _change(kv, key, remove)
    return [k.run_id for k in doomed]


async def after_run(bus: Bus, retain: int, ended: EndedRun, kept: ev.RunLogKept) -> None:
    """Index the run that ended with the files it stored, then prune past the newest
    `retain`; a failure is a warning (the next run of the environment prunes again)."""
    log = jlog.get("runner", project=ended.project, run_id=ended.run_id, attempt=ended.attempt)
    try:
        pruned = await _record_ended(bus, retain, ended, kept)
    except Exception as exc:  # noqa: BLE001 - the run's result stands without its pruning
        log.warning("retention_failed", error=repr(exc))
        return
    if pruned:
        log.info("retention_pruned", runs=len(pruned))


async def _record_ended(bus: Bus, retain: int, ended: EndedRun, kept: ev.RunLogKept) -> list[str]:
    return await record_and_prune(
        bus,
        retain,
        project=ended.project,
        scope=ended.scope,
        environment=ended.environment,
        run=Kept(
            run_id=ended.run_id,
            principal=ended.principal,
            objects=[kept.object, *kept.artifacts.values(), *await _files(bus, ended)],
        ),
    )


async def _files(bus: Bus, ended: EndedRun) -> list[str]:
    """The blobs this run stored: run_results for a retry, and the manifest and
    run_results of the state it published (often the same run_results blob)."""
    found: list[str] = []
    saved = await bus.last_event(subjects.retry_event(ended.project, ended.principal, "saved"))
    if isinstance(saved, ev.RetryStateSaved) and saved.run_id == ended.run_id:
        found.append(saved.run_results_digest)
    environment = ended.environment
    if environment is not None:
        state = await bus.last_event(
            subjects.state_event(ended.project, environment.key(), "published")
        )
        if isinstance(state, ev.StatePublished) and state.run_id == ended.run_id:
            found += [state.manifest_digest, state.run_results_digest or ""]
    return list(dict.fromkeys(f for f in found if f))

"""A run's end, for its log: keep the whole log as an object named for the run, and dbt's
artifacts as it wrote them, say so with `run.log_kept` (before RunFinished, so whoever
sees the end can read them), then let retention remove the files of runs past the newest
RUN_RETENTION.

Neither step may change how the run ended: a log that could not be kept, or a retention
pass that failed, is a warning in the runner's log, and the next run of the environment
prunes what this one could not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.runner import artifacts, retention
from shared import events as ev
from shared import logging as jlog
from shared import run_logs, subjects
from shared.bus import BLOBS, Bus
from shared.reader import Slice

if TYPE_CHECKING:
    from services.runner.attempt import Attempt

__all__ = ["keep"]


async def keep(attempt: Attempt, result: ev.RunResult) -> None:
    """Keep the log of `attempt`'s run, ended with `result`, then apply retention."""
    log = jlog.get("runner", project=attempt.project, run_id=attempt.run_id, attempt=attempt.number)
    bus = attempt.ctx.bus
    try:
        kept = await _keep_log(bus, attempt, result.status)
    except Exception as exc:  # noqa: BLE001 - the run's result stands without its kept log
        log.warning("run_log_not_kept", error=repr(exc))
        return
    log.info("run_log_kept", lines=kept.lines, bytes=kept.bytes)
    plan = attempt.prepared.plan
    try:
        pruned = await retention.record_and_prune(
            bus,
            attempt.ctx.settings.run_retention,
            project=attempt.project,
            scope=plan.environment.key() if plan.environment else plan.lease_scope,
            environment=plan.environment,
            run=retention.Kept(
                run_id=attempt.run_id,
                principal=attempt.body.requested_by,
                objects=[kept.object, *kept.artifacts.values(), *await _files(bus, attempt)],
            ),
        )
    except Exception as exc:  # noqa: BLE001 - the next run of the environment prunes again
        log.warning("retention_failed", error=repr(exc))
        return
    if pruned:
        log.info("retention_pruned", runs=len(pruned))


async def _keep_log(bus: Bus, attempt: Attempt, status: str) -> ev.RunLogKept:
    subject = subjects.run_log(attempt.run_id)
    # The closing line is published with an ack: the stream stores a subject's messages in
    # the order they came, so once it is stored every line before it is too. It names only
    # the run id, attempt and status; every line before it was masked when published.
    ack = await bus.js.publish(
        subject,
        f"jetdbt: run {attempt.run_id} {status} (attempt {attempt.number})".encode(),
        stream=run_logs.STREAM,
    )
    lines: list[str] = []
    async with Slice(bus.js, run_logs.STREAM, subject, until=ack.seq) as stored:
        async for batch in stored:
            lines += [msg.data.decode("utf-8", errors="replace") for _, msg in batch]
    data = run_logs.encode(lines)
    name = run_logs.object_name(attempt.run_id)
    await (await bus.js.object_store(BLOBS)).put(name, data)
    kept = ev.RunLogKept(
        project=attempt.project,
        run_id=attempt.run_id,
        attempt=attempt.number,
        object=name,
        lines=len(lines),
        bytes=len(data),
        artifacts=await artifacts.store(bus, attempt.artifacts),
    )
    await bus.publish(kept)
    return kept


async def _files(bus: Bus, attempt: Attempt) -> list[str]:
    """The blobs this run stored: run_results for a retry, and the manifest and
    run_results of the state it published (often the same run_results blob)."""
    found: list[str] = []
    saved = await bus.last_event(
        subjects.retry_event(attempt.project, attempt.body.requested_by, "saved")
    )
    if isinstance(saved, ev.RetryStateSaved) and saved.run_id == attempt.run_id:
        found.append(saved.run_results_digest)
    environment = attempt.prepared.plan.environment
    if environment is not None:
        state = await bus.last_event(
            subjects.state_event(attempt.project, environment.key(), "published")
        )
        if isinstance(state, ev.StatePublished) and state.run_id == attempt.run_id:
            found += [state.manifest_digest, state.run_results_digest or ""]
    return list(dict.fromkeys(f for f in found if f))

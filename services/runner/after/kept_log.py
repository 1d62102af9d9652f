"""A run's end, for its log: keep the whole log as an object named for the run, and dbt's
artifacts as it wrote them, and say so with `run.log_kept` (before RunFinished, so whoever
sees the end can read them). Retention (retention.py `after_run`) is told what was kept.

Neither step may change how the run ended: a log that could not be kept, or a retention
pass that failed, is a warning in the runner's log, and the next run of the environment
prunes what this one could not.
"""

from __future__ import annotations

import msgspec
from jetdbt.services.runner.after import artifacts
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.stream_batches import Slice
from jetdbt.shared.bus.streams import BLOBS, LOGS
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.project.environments import Environment
from jetdbt.shared.runs import run_logs

__all__ = ["EndedRun", "keep"]


class EndedRun(msgspec.Struct, frozen=True, kw_only=True):
    """What the end of a run tells its log and retention: no more of the attempt."""

    project: str
    run_id: str
    attempt: int
    principal: str
    status: str
    scope: str  # the environment's key, else the run's lease scope: retention's index
    environment: Environment | None = None


async def keep(bus: Bus, ended: EndedRun, produced: dict[str, bytes]) -> ev.RunLogKept | None:
    """Keep the log of `ended` and the artifacts its last invocation `produced`; None (and
    a warning) when it could not be kept."""
    log = jlog.get("runner", project=ended.project, run_id=ended.run_id, attempt=ended.attempt)
    try:
        kept = await _keep_log(bus, ended, produced)
    except Exception as exc:  # noqa: BLE001 - the run's result stands without its kept log
        log.warning("run_log_not_kept", error=repr(exc))
        return None
    log.info("run_log_kept", lines=kept.lines, bytes=kept.bytes)
    return kept


async def _keep_log(bus: Bus, ended: EndedRun, produced: dict[str, bytes]) -> ev.RunLogKept:
    subject = subjects.run_log(ended.run_id)
    # The closing line is published with an ack: the stream stores a subject's messages in
    # the order they came, so once it is stored every line before it is too. It names only
    # the run id, attempt and status; every line before it was masked when published.
    ack = await bus.js.publish(
        subject,
        f"jetdbt: run {ended.run_id} {ended.status} (attempt {ended.attempt})".encode(),
        stream=LOGS,
    )
    lines: list[str] = []
    async with Slice(bus.js, LOGS, subject, until=ack.seq) as stored:
        async for batch in stored:
            lines += [msg.data.decode("utf-8", errors="replace") for _, msg in batch]
    data = run_logs.encode(lines)
    name = run_logs.object_name(ended.run_id)
    await (await bus.js.object_store(BLOBS)).put(name, data)
    kept = ev.RunLogKept(
        project=ended.project,
        run_id=ended.run_id,
        attempt=ended.attempt,
        object=name,
        lines=len(lines),
        bytes=len(data),
        artifacts=await artifacts.store(bus, produced),
    )
    await bus.publish(kept)
    return kept

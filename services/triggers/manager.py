"""Triggers, as a process manager: reads events, publishes run commands, and nothing else.

A durable consumer of the event log (streams.yaml `triggers`) reads, in order, the job
facts (which jobs have triggers), the declared writes a runner recorded
(`relation.materialized`) and the ends of runs (`run.finished`). A declared write of a
relation a job lists in `on_relation` starts that job with trigger `relation`; the end of a
run of job B starts every job `after` B with that outcome, with trigger `after`. A dbt run's
own models start nothing (the reference design's "no cascade from dbt"): chaining runs is
what `after` is for.

A trigger fires once per causing event: the run id is made from the cause's stream sequence
and the job (`t<seq>-<job>-<project digest>`), it is the command's message id too, and a
run id the log already holds is not asked for again. So a redelivery, a replay of the same
event or a restart of this service starts no second run. The service publishes only
`dbt.cmd.run.<project>.triggers` (services/access/nats_users.py); the runner records the
run as asked for by principal `triggers`, an operator's process, whose trigger it believes.
"""

from __future__ import annotations

import asyncio
import hashlib

import msgspec

from services.triggers.index import Armed, JobIndex
from shared import commands, subjects, supervise
from shared import events as ev
from shared import logging as jlog
from shared.bus import EVENTS, Bus

__all__ = ["Triggers", "CONSUMER", "PRINCIPAL", "run_id_for"]

CONSUMER = "triggers"
PRINCIPAL = subjects.TRIGGERS_PRINCIPAL


def run_id_for(kind: str, seq: int, armed: Armed) -> str:
    """The run one cause starts for one job: the same cause, the same run id."""
    digest = hashlib.sha256(armed.project.encode()).hexdigest()[:8]
    return f"{kind}{seq}-{armed.name}-{digest}"


class Triggers:
    def __init__(self, bus: Bus):
        self.bus = bus
        self.log = jlog.get("triggers")

    async def run(self, stop: asyncio.Event) -> None:
        await supervise.forever(self._run_once, stop, self.log, "triggers_failed")

    async def _run_once(self, stop: asyncio.Event) -> None:
        index = JobIndex()
        await index.load(self.bus)
        self.log.info("triggers_started", armed=len(index.jobs))

        async def handle(msg) -> None:
            await self.handle(index, msg.metadata.sequence.stream, msg.subject, msg.data)

        await supervise.each_message(self.bus.js, CONSUMER, EVENTS, stop, handle)

    async def handle(self, index: JobIndex, seq: int, subject: str, data: bytes) -> None:
        """One event at stream sequence `seq`: fold it, or start the runs it causes."""
        try:
            event = ev.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.log.warning("trigger_event_unreadable", seq=seq, subject=subject)
            return
        if not ev.fits(event, subject):
            return
        if isinstance(event, ev.JobSaved | ev.JobDeleted):
            index.fold(seq, event)
        elif isinstance(event, ev.RelationMaterialized) and event.status == "success":
            for armed in index.on_relation(event.relation, seq):
                await self._start(armed, run_id_for("t", seq, armed), "relation")
        elif isinstance(event, ev.RunFinished):
            await self._after(index, event, seq)

    async def _after(self, index: JobIndex, event: ev.RunFinished, seq: int) -> None:
        if not index.chains(event.project):
            return
        requested = await self.bus.last_event(
            subjects.run_event(event.project, event.run_id, "requested")
        )
        job = getattr(requested, "job", "")
        if not job:
            return
        for armed in index.after(event.project, job, event.result.status, seq):
            await self._start(armed, run_id_for("a", seq, armed), "after")

    async def _start(self, armed: Armed, run_id: str, trigger: str) -> None:
        asked = await self.bus.last_event(subjects.run_event_of_any_project(run_id, "requested"))
        if asked is not None:
            return  # this cause started it already
        command = commands.RunCommand(
            command=commands.JobRun(name=armed.name), run_id=run_id, trigger=trigger
        )
        await self.bus.publish_command("run", armed.project, command, run_id, principal=PRINCIPAL)
        self.log.info("trigger_fired", project=armed.project, job=armed.name, run_id=run_id)

"""Triggers, as a process manager: reads events, publishes run commands, and nothing else.

A durable consumer of the event log (streams.yaml `triggers`) reads, in order, the job
facts (which jobs have triggers), the declared writes a runner recorded
(`relation.materialized`) and the ends of runs (`run.finished`). A relation a job lists in
`on_relation` starts that job with trigger `relation` when it is written: by a declared
write, or by a run of another project whose result says a model, seed or snapshot passed
that keyed to it (jetdbt.shared.runs.written_relations: only a command that builds, never into a
scratch schema; nodes kept in a blob are read back). A project's own runs wake none of its jobs
(dbt orders its own DAG, the reference design's "no cascade from dbt"; chaining runs is
what `after` is for), and one run wakes a job once however many of its relations it wrote.
A write wakes only the jobs of its writer's team (a declared write's publisher's, a run's
project's; the operator's declared writes any team's): no team starts runs in another
team's project, whatever relation it writes.
The end of a run of job B starts every job `after` B with that outcome, with trigger
`after`.

A trigger fires once per causing event: the run id is made from the cause's stream sequence
and the job (`t<seq>-<job>-<project digest>`, `a<seq>-…` for `after`), it is the command's
message id too, and a run id the log already holds is not asked for again. So a
redelivery, a replay of the same event or a restart of this service starts no second run.
The service publishes only `dbt.cmd.run.<project>.triggers` (services/access/nats_users.py);
the runner records the run as asked for by principal `triggers`, an operator's process,
whose trigger it believes.

A cycle is refused when the job closing it is saved (services/runner/facts/trigger_checks.py),
but one can close later: a deploy that makes a project write a relation a job of the other
side reads. So each triggered run carries its depth in its chain of causes (1 when its cause
is a declared write or a run no trigger started, its cause's depth plus one otherwise), and
a runner records a run deeper than jetdbt.shared.bus.commands.MAX_TRIGGER_DEPTH as requested and
refuses it, naming why: the loop stops there, and the refusal is on the log.
"""

from __future__ import annotations

import asyncio
import hashlib

import msgspec
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.identity import principals
from jetdbt.shared.jobs.triggered_jobs import Armed, JobIndex
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from jetdbt.shared.runs.written_relations import run_writes, written

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
            team = event.team if event.publisher else None  # the operator's: any team's
            for armed in await self._of_team(index.on_relation(event.relation, seq), team):
                await self._start(armed, run_id_for("t", seq, armed), "relation", 1)
        elif isinstance(event, ev.RunFinished):
            await self._finished(index, event, seq)

    async def _finished(self, index: JobIndex, event: ev.RunFinished, seq: int) -> None:
        chains, reads = index.chains(event.project), index.reads_beyond(event.project)
        if not (chains or reads):
            return
        requested = await self.bus.last_event(
            subjects.run_event(event.project, event.run_id, "requested")
        )
        if not isinstance(requested, ev.RunRequested):
            return
        depth = requested.depth + 1
        if chains and requested.job:
            for armed in index.after(event.project, requested.job, event.result.status, seq):
                await self._start(armed, run_id_for("a", seq, armed), "after", depth)
        if reads and await run_writes(self.bus, requested):
            woken = index.on_relations(await self._wrote(event), seq, event.project)
            team = await principals.project_team(self.bus, event.project)
            for armed in await self._of_team(woken, team):
                await self._start(armed, run_id_for("t", seq, armed), "relation", depth)

    async def _of_team(self, armed: list[Armed], team: str | None) -> list[Armed]:
        """The jobs a write of `team` may wake: its own team's (None: the operator's, any).
        No team starts runs in another's project, however it writes what they read."""
        if team is None:
            return armed
        return [a for a in armed if await principals.project_team(self.bus, a.project) == team]

    async def _wrote(self, event: ev.RunFinished) -> set[str]:
        try:
            return await written(self.bus, event)
        except ValueError as exc:
            self.log.warning("trigger_writes_unreadable", run_id=event.run_id, error=str(exc))
            return set()

    async def _start(self, armed: Armed, run_id: str, trigger: str, depth: int) -> None:
        asked = await self.bus.last_event(subjects.run_event_of_any_project(run_id, "requested"))
        if asked is not None:
            return  # this cause started it already
        command = commands.RunCommand(
            command=commands.JobRun(name=armed.name), run_id=run_id, trigger=trigger, depth=depth
        )
        await self.bus.publish_command("run", armed.project, command, run_id, principal=PRINCIPAL)
        self.log.info(
            "trigger_fired", project=armed.project, job=armed.name, run_id=run_id, depth=depth
        )

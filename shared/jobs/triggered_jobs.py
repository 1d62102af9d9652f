"""The saved jobs that have triggers, folded from job facts in the order the log holds them:
what the triggers service fires, and what a runner searches for a cycle when a job is saved.

Each entry keeps the stream sequence of the job's `job.saved`: a cause older than the job's
saved version never fires it, so a consumer created on a long log (or one that re-reads
what it did not ack) starts nothing for writes that came before the trigger existed.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.stream_batches import last_matching
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.runs.relations import normalise
from nats.js import api

__all__ = ["Armed", "JobIndex", "JOB_FACTS"]

JOB_FACTS = subjects.family_pattern("job")
SNAPSHOT_SECONDS = 30.0


class Armed(msgspec.Struct, frozen=True):
    project: str
    name: str
    saved_seq: int
    spec: commands.JobSpec


class JobIndex:
    def __init__(self):
        self.jobs: dict[tuple[str, str], Armed] = {}

    def fold(self, seq: int, event: ev.Event) -> None:
        """A job fact at stream sequence `seq`; an older one than the entry's is ignored."""
        key = (event.project, getattr(event, "name", ""))
        held = self.jobs.get(key)
        if held is not None and held.saved_seq >= seq:
            return
        if isinstance(event, ev.JobDeleted):
            self.jobs.pop(key, None)
            return
        if not isinstance(event, ev.JobSaved):
            return
        try:
            spec = msgspec.convert(event.spec, commands.JobSpec)
        except msgspec.ValidationError:
            self.jobs.pop(key, None)  # a job a later version cannot read starts nothing
            return
        if spec.on_relation or spec.after is not None:
            self.jobs[key] = Armed(event.project, event.name, seq, spec)
        else:
            self.jobs.pop(key, None)

    def on_relation(self, relation: str, seq: int) -> list[Armed]:
        key = normalise(relation)
        return [a for a in self.jobs.values() if key in a.spec.on_relation and a.saved_seq < seq]

    def on_relations(self, relations: set[str], seq: int, written_by: str) -> list[Armed]:
        """Jobs of projects other than `written_by` that read one of `relations`: each once,
        however many of them it lists (a project's own writes wake none of its jobs)."""
        return [
            a
            for a in self.jobs.values()
            if a.project != written_by and a.saved_seq < seq and relations & set(a.spec.on_relation)
        ]

    def reads_beyond(self, project: str) -> bool:
        """Whether a job of another project reads a relation (else `project`'s runs wake none)."""
        return any(a.project != project and a.spec.on_relation for a in self.jobs.values())

    def chains(self, project: str) -> bool:
        """Whether a job of `project` runs after another (else a run's end starts nothing)."""
        return any(a.project == project and a.spec.after is not None for a in self.jobs.values())

    def after(self, project: str, job: str, status: str, seq: int) -> list[Armed]:
        return [
            a
            for a in self.jobs.values()
            if a.project == project
            and a.spec.after is not None
            and a.spec.after.job == job
            and a.spec.after.outcome in (status, "any")
            and a.saved_seq < seq
        ]

    async def load(self, bus) -> None:
        """Every job's last fact, as the log holds it now (read at each start)."""
        if not await last_matching(bus.js, EVENTS, JOB_FACTS):
            return
        done = asyncio.Event()

        async def on_msg(msg) -> None:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                event = ev.decode(msg.data)
                if ev.fits(event, msg.subject):
                    self.fold(msg.metadata.sequence.stream, event)
            if msg.metadata.num_pending == 0:
                done.set()

        sub = await bus.js.subscribe(
            JOB_FACTS,
            stream=EVENTS,
            cb=on_msg,
            ordered_consumer=True,
            config=api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT, mem_storage=True
            ),
            inactive_threshold=30,
        )
        try:
            await asyncio.wait_for(done.wait(), SNAPSHOT_SECONDS)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

"""A schedule's fires counted against its runs, read from the streams themselves.

A fire is a message the server made in DBT_SCHEDULES for a schedule; DBT_COMMANDS sources
it as a run command (carrying the `Nats-Scheduler` and `Nats-Stream-Source` headers, which
no client may set); its run is the runner's `run.requested` of trigger `schedule` for that
command. One home for the counting the
schedule tests share: across a restart of the stack, of the NATS server, of a cluster node.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import nats.errors
from jetdbt.services.cli import client
from jetdbt.services.runner.facts.jobs import NEXT, SCHEDULER
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import JobCommand, JobSpec, OperationCommand
from nats.js.api import ConsumerConfig, DeliverPolicy

from tests.support.helpers import deploy_and_wait, wait_for
from tests.support.paths import EXAMPLE

__all__ = [
    "SPEC",
    "messages",
    "fires",
    "sourced",
    "source_seq",
    "events",
    "at",
    "next_due",
    "scheduled",
    "paused",
    "one_run_per_fire",
]

# The cheapest dbt invocation the example has: a macro that only renders SQL.
SPEC = JobSpec(
    command=OperationCommand(macro="cents_to_dollars", macro_args={"column_name": "amount"})
)


async def messages(js, stream: str, subject: str, timeout: float = 30) -> list:
    """Every message on `subject` in `stream`, in order; read again while a cluster that
    lost a node answers 503 or nothing (its stream or the reading consumer electing)."""

    async def read():
        with contextlib.suppress(nats.errors.Error):
            return (await _read(js, stream, subject),)

    (found,) = await wait_for(read, timeout=timeout, interval=0.5)
    return found


async def _read(js, stream: str, subject: str) -> list:
    info = await js.stream_info(stream)
    if not info.state.messages:
        return []
    sub = await js.pull_subscribe(
        subject, stream=stream, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    found = []
    try:
        # Read what the consumer has pending, not until a fetch times out: a read is as
        # quick as the messages are few (a fire counted in a wait loop is read many times).
        pending = (await sub.consumer_info()).num_pending
        while pending:
            found += await sub.fetch(min(pending, 200), timeout=5)
            pending = (await sub.consumer_info()).num_pending
        return found
    finally:
        await sub.unsubscribe()


async def fires(js, project: str) -> list:
    """The fires the server made for the schedules of `project`, in DBT_SCHEDULES."""
    prefix = subjects.schedule_target(project, "x").rsplit(".", 1)[0]
    return await messages(js, "DBT_SCHEDULES", f"{prefix}.*")


async def sourced(js, project: str) -> list:
    """The run commands DBT_COMMANDS holds for those fires (sourced from DBT_SCHEDULES)."""
    msgs = await messages(js, "DBT_COMMANDS", f"dbt.cmd.run.{project}.>")
    return [m for m in msgs if (m.headers or {}).get(SCHEDULER)]


def source_seq(command) -> int:
    """The sequence in DBT_SCHEDULES of the fire a sourced run command is."""
    return int(command.headers["Nats-Stream-Source"].split()[1])


async def events(js, kind: type) -> list:
    return [
        e
        for m in await messages(js, "DBT_EVENTS", "dbt.evt.>")
        if isinstance(e := ev.decode(m.data), kind)
    ]


def at(fire) -> float:
    """When the server made a fire (its time in DBT_SCHEDULES), in epoch seconds."""
    return fire.metadata.timestamp.timestamp()


def next_due(fire) -> datetime:
    """The due time the server named for the fire after this one."""
    return datetime.fromisoformat(fire.headers[NEXT].replace("Z", "+00:00"))


async def one_run_per_fire(js, job: str, found: list, timeout: float = 300) -> list:
    """Wait until every fire in `found` is a run command and the runners recorded, for each,
    a run or its joining the run of the fire before (`schedule.coalesced`, while that run
    was queued or running); assert one of them per fire (none lost, none doubled, run ids
    unique, each of `job`); the runs' requests."""
    project = found[0].subject.split(".")[3]

    async def all_sourced():
        commands = await sourced(js, project)
        return commands if len(commands) >= len(found) else None

    commands = await wait_for(all_sourced, timeout=timeout)
    assert sorted(source_seq(c) for c in commands) == sorted(
        f.metadata.sequence.stream for f in found
    ), "a fire was sourced twice, or one not made by the schedule"

    async def all_recorded():
        requested = [e for e in await events(js, ev.RunRequested) if e.trigger == "schedule"]
        joined = await events(js, ev.ScheduleCoalesced)
        return (requested, joined) if len(requested) + len(joined) >= len(found) else None

    requested, joined = await wait_for(all_recorded, timeout=timeout)
    assert sorted(e.command_seq for e in requested + joined) == sorted(
        c.metadata.sequence.stream for c in commands
    )
    assert {e.job for e in requested + joined} == {job}
    assert len({e.run_id for e in requested}) == len(requested)
    assert {e.run_id for e in joined} <= {e.run_id for e in requested}
    return requested


async def scheduled(bus, project: str, job: str, every: int) -> None:
    """The example deployed as `project`, `job` saved (SPEC) and scheduled `@every` seconds."""
    await deploy_and_wait(bus, EXAMPLE, project)
    saved = await client.job(bus, project, JobCommand(action="save", name=job, job=SPEC))
    assert isinstance(saved, ev.JobSaved), saved
    cron = f"@every {every}s"
    active = await client.job(bus, project, JobCommand(action="schedule", name=job, cron=cron))
    assert isinstance(active, ev.ScheduleSaved) and active.state == "active", active


async def paused(bus, project: str, job: str, every: int) -> list:
    """Pause `job`'s schedule and wait out a fire already on its way; every fire it made."""
    done = await client.job(bus, project, JobCommand(action="pause", name=job))
    assert isinstance(done, ev.ScheduleSaved) and done.state == "paused", done
    await asyncio.sleep(every + 1)
    return await fires(bus.js, project)

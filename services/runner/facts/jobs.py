"""Saved jobs and their schedules, as a runner records them from `dbt.cmd.job.<project>`.

A job is facts on the log (`job.saved`, `job.deleted`): a runner reads the last one when a
run of the job arrives, never a projection. A schedule is a JetStream message schedule:
the runner stores its definition on DBT_SCHEDULES (`dbt.sched.<project>.<job>`), and from
then on the server itself publishes the job's run command at each fire (onto
`dbt.fire.run.…`, which DBT_COMMANDS sources as `dbt.cmd.run.…`), so no jetdbt process
keeps time. Pausing or removing replaces the definition by a one-shot
schedule due now whose target is a parking subject (`dbt.sched.parked.<project>.<job>`,
which no runner reads): the server fires it there once and then purges the definition
itself, since no service deletes a stream's messages.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import msgspec
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.facts import trigger_checks
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.streams import SCHEDULES_STREAM
from jetdbt.shared.identity import principals
from jetdbt.shared.jobs.schedule_interval import interval_problem
from jetdbt.shared.wording.short_quote import quote
from nats.js.errors import BadRequestError

__all__ = [
    "SCHEDULER",
    "handle",
    "job_of",
    "fired",
    "is_fire",
    "repeated_fire",
    "coalesced",
    "check_schedules_supported",
]

# What the server sets on a message a schedule published and on one a stream sourced (a
# client's publish that sets either is refused by the server).
SCHEDULER = "Nats-Scheduler"
NEXT = "Nats-Schedule-Next"
SOURCED = "Nats-Stream-Source"
# Message schedules with cron, intervals and time zones arrived in nats-server 2.14.
SCHEDULES_SINCE = (2, 14)


def check_schedules_supported(version) -> str | None:
    """Why this server cannot hold a schedule (its version), or None."""
    have = (version.major, version.minor)
    if have < SCHEDULES_SINCE:
        return (
            f"message schedules need nats-server {SCHEDULES_SINCE[0]}.{SCHEDULES_SINCE[1]}"
            f" or later; this server is {version.major}.{version.minor}.{version.patch}"
            " (the rest of jetdbt runs on it; schedules do not)"
        )
    return None


async def job_of(bus, project: str, name: str) -> ev.JobSaved | None:
    """The job as saved now, from the log; None when it was never saved or is deleted."""
    found = await bus.last_event(subjects.job_event(project, name, "*"))
    return found if isinstance(found, ev.JobSaved) else None


async def _schedule_of(bus, project: str, name: str) -> ev.ScheduleSaved | None:
    found = await bus.last_event(subjects.schedule_event(project, name, "saved"))
    return found if isinstance(found, ev.ScheduleSaved) else None


async def handle(ctx: RunnerContext, msg, project: str, problem: str | None, seq: int, caller):
    """Record one job command's facts, or a JobRefused naming why not."""
    body = None
    try:
        body = commands.decode_job(msg.data)
        problem = problem or principals.claim_problem(body.requested_by, caller.principal)
    except commands.CommandRejected as exc:
        problem = problem or str(exc)
    if problem is None:
        owner = await ctx.bus.last_event(subjects.deploy_event(project, "requested"))
        problem = principals.command_problem(caller, "job", project, getattr(owner, "team", ""))
    if problem is None:
        role = principals.run_role(caller, project)
        problem = await _apply(ctx, project, body, seq, caller.principal, role)
    if problem is not None:
        await ctx.bus.publish(
            ev.JobRefused(
                project=project,
                name=body.name if body else "",
                action=body.action if body else "",
                reason=problem,
                command_seq=seq,
            )
        )


async def _apply(
    ctx: RunnerContext,
    project: str,
    body: commands.JobCommand,
    seq: int,
    principal: str,
    role: str,
) -> str | None:
    bus, name = ctx.bus, body.name
    if body.action == "save":
        refused = await trigger_checks.trigger_problem(ctx, project, name, body.job)
        if refused is not None:
            return refused
        spec = msgspec.to_builtins(body.job)
        by = {"saved_by": principal, "role": role}
        await bus.publish(ev.JobSaved(project=project, name=name, spec=spec, command_seq=seq, **by))
        return None
    if await job_of(bus, project, name) is None:
        return f"project {project!r} has no job {name!r}: jetdbt job list --project {project}"
    schedule = await _schedule_of(bus, project, name)
    if body.action == "delete":
        if schedule is not None and schedule.state != "removed":
            await _park(ctx, project, name, schedule, "removed", seq)
        await bus.publish(
            ev.JobDeleted(project=project, name=name, deleted_by=principal, command_seq=seq)
        )
        return None
    if body.action == "schedule":
        saved = ev.ScheduleSaved(
            project=project,
            job=name,
            state="active",
            cron=body.cron,
            tz=body.tz,
            principal=principal,
            role=role,
            command_seq=seq,
        )
        return await _activate(ctx, saved)
    if schedule is None or schedule.state == "removed":
        return f"job {name!r} of project {project!r} has no schedule to {body.action}"
    if body.action == "resume":
        return await _activate(ctx, msgspec.structs.replace(schedule, command_seq=seq, role=role))
    state = "paused" if body.action == "pause" else "removed"
    await _park(ctx, project, name, schedule, state, seq)
    return None


async def _activate(ctx: RunnerContext, saved: ev.ScheduleSaved) -> str | None:
    """Store the definition the server fires, then record the schedule as active; a cron
    that fires more often than SCHEDULE_MIN_INTERVAL_SECONDS is refused (a resume too)."""
    refused = interval_problem(saved.cron, ctx.settings.schedule_min_interval_seconds)
    refused = refused or check_schedules_supported(ctx.bus.nc.connected_server_version)
    if refused:
        return refused
    headers = {
        "Nats-Schedule": saved.cron,
        "Nats-Schedule-Target": subjects.schedule_target(saved.project, saved.principal),
    }
    if saved.tz:
        headers["Nats-Schedule-Time-Zone"] = saved.tz
    fire = commands.RunCommand(command=commands.JobRun(name=saved.job))
    try:
        await ctx.bus.js.publish(
            subjects.schedule_definition(saved.project, saved.job),
            msgspec.json.encode(fire),
            stream=SCHEDULES_STREAM,
            headers=headers,
        )
    except BadRequestError as exc:  # the server checks the expression and the time zone
        return f"the server refused schedule {quote(saved.cron)}: {exc.description}"
    await ctx.bus.publish(msgspec.structs.replace(saved, state="active", at=datetime.now(UTC)))
    return None


async def _park(
    ctx: RunnerContext, project: str, name: str, schedule: ev.ScheduleSaved, state: str, seq: int
) -> None:
    """Replace the definition by one that never fires; record the schedule's new state."""
    due = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await ctx.bus.js.publish(
        subjects.schedule_definition(project, name),
        msgspec.json.encode({"job": name, "state": state, "command_seq": seq}),
        stream=SCHEDULES_STREAM,
        headers={
            "Nats-Schedule": f"@at {due}",
            "Nats-Schedule-Target": subjects.schedule_parked(project, name),
        },
    )
    await ctx.bus.publish(
        msgspec.structs.replace(schedule, state=state, command_seq=seq, at=datetime.now(UTC))
    )


async def role_cap(bus, msg, project: str, saved: ev.JobSaved, body: commands.RunCommand) -> str:
    """The highest role a run of the job `saved` takes, whoever starts it (a schedule's fire
    and a trigger come in by the operator's door): the role it was saved with and, for a
    fire, the one it was scheduled with. A fact from before roles were recorded gives the
    least role that could have made it."""
    roles = [saved.role or principals.VERB_ROLES["job"]]
    if is_fire(msg, project, body):
        schedule = await _schedule_of(bus, project, saved.name)
        roles.append((schedule.role if schedule else "") or principals.VERB_ROLES["job"])
    return principals.least_role(*roles)


def is_fire(msg, project: str, body: commands.RunCommand) -> bool:
    """Whether a run command is the server's fire of its job's schedule: headers only the
    server sets (a client's publish carrying them is refused) naming the definition a
    runner stored for this project's job, sourced from DBT_SCHEDULES."""
    return isinstance(body.command, commands.JobRun) and _fired_by(msg, project, body.command.name)


def _fired_by(msg, project: str, job: str) -> bool:
    headers = msg.headers or {}
    return headers.get(SCHEDULER) == subjects.schedule_definition(project, job) and headers.get(
        SOURCED, ""
    ).startswith(f"{SCHEDULES_STREAM} ")


def _next_due(msg) -> datetime | None:
    with contextlib.suppress(ValueError):  # a server that says no next fire
        return datetime.fromisoformat((msg.headers or {}).get(NEXT, "").replace("Z", "+00:00"))
    return None


async def repeated_fire(bus, project: str, body: commands.RunCommand, msg, seq: int) -> bool:
    """Whether a fire is one the job's schedule already made: a server that crashed
    restores its schedules from a state it saved a while before, and may fire a due time
    again, as a new message (so a new run id). Each fire names the due time after it, so
    a fire naming the same one as the job's last recorded fire, under another command, is
    that fire again. A redelivery of the same command is not (it goes on as itself)."""
    last = await bus.last_event(subjects.schedule_event(project, body.command.name, "fired"))
    due = _next_due(msg)
    return (
        isinstance(last, ev.ScheduleFired)
        and due is not None
        and last.next_at == due
        and last.command_seq != seq
    )


async def coalesced(bus, project: str, job: str, msg, seq: int) -> ev.ScheduleCoalesced | None:
    """The fire joining the run of the job's previous fire, while that run is still queued
    or running (it never queues a second run behind its own); None when it starts one."""
    last = await bus.last_event(subjects.schedule_event(project, job, "fired"))
    if not isinstance(last, ev.ScheduleFired) or last.command_seq == seq:
        return None  # the first fire, or this very fire redelivered
    if await bus.run_end(project, last.run_id) is not None:
        return None
    return ev.ScheduleCoalesced(
        project=project,
        job=job,
        run_id=last.run_id,
        fired_at=msg.metadata.timestamp,
        next_at=_next_due(msg),
        command_seq=seq,
    )


def fired(msg, project: str, job: str, run_id: str, seq: int) -> ev.ScheduleFired | None:
    """The fire a run command is, when the server published it for `job`'s schedule."""
    if not _fired_by(msg, project, job):
        return None
    return ev.ScheduleFired(
        project=project,
        job=job,
        run_id=run_id,
        fired_at=msg.metadata.timestamp,
        next_at=_next_due(msg),
        command_seq=seq,
    )

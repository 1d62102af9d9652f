"""`jetdbt job ...` and `jetdbt schedule ...`: saved jobs and their schedules.

Changes go onto the bus as job commands (a runner checks and records them); lists are read
from the query API. A job's run is followed like any run (`jetdbt run`'s output contract).
"""

from __future__ import annotations

import asyncio
import sys

import msgspec
from jetdbt.services.cli import client
from jetdbt.services.cli.common import EXIT_REFUSED, CliError, api_call, open_bus
from jetdbt.services.cli.run_commands import dbt_command_of, follow, run_args_of
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import (
    JobAfter,
    JobCommand,
    JobRun,
    JobSpec,
    RunCommand,
    check_time_zone,
)
from jetdbt.shared.jobs.schedule_interval import interval_problem
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_job", "cmd_schedule"]

_SCHEDULE_ACTIONS = {"pause": "pause", "resume": "resume", "remove": "unschedule"}


async def _send(settings: Settings, project: str, command: JobCommand) -> int:
    """Publish one job command; print what it did, or why it was refused."""
    bus = await open_bus(settings)
    try:
        done = await client.job(bus, subjects.check_project(project), command)
    finally:
        await bus.close()
    if isinstance(done, ev.JobRefused):
        print(f"job {command.name} {command.action} refused: {done.reason}", file=sys.stderr)
        return EXIT_REFUSED
    if isinstance(done, ev.ScheduleSaved):
        print(f"schedule of job {done.job} ({done.cron} {done.tz or 'UTC'}): {done.state}")
    else:
        print(f"job {command.name}: {'saved' if command.action == 'save' else 'deleted'}")
    return 0


def _spec(args, **triggers) -> JobSpec:
    return JobSpec(
        command=dbt_command_of(args), args=run_args_of(args), environment=args.env or "", **triggers
    )


def _triggered(args) -> JobSpec:
    """The job `job save` describes, with its triggers (services/triggers)."""
    if args.outcome != "any" and not args.after:
        raise CliError("--outcome goes with --after JOB")
    try:
        after = JobAfter(job=args.after, outcome=args.outcome) if args.after else None
        return _spec(args, on_relation=args.on_relation or [], after=after)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _jobs(settings: Settings, project: str) -> list[dict]:
    path = f"/v1/projects/{subjects.check_project(project)}/jobs?limit=500"
    status, body = api_call(settings, path)
    if status != 200:
        raise CliError(f"GET {path} answered {status}: {body.decode(errors='replace')[:300]}")
    return msgspec.json.decode(body)["jobs"]


def _described(spec: dict) -> str:
    command = spec.get("command", {})
    words = command.get("label", "build").replace("_", " ")
    select = " ".join(command.get("select", []))
    return f"{words} {select}".strip()


async def cmd_job(args, settings: Settings) -> int:
    if args.job_cmd == "save":
        return await _send(
            settings, args.project, JobCommand(action="save", name=args.name, job=_triggered(args))
        )
    if args.job_cmd == "delete":
        return await _send(settings, args.project, JobCommand(action="delete", name=args.name))
    if args.job_cmd == "run":
        command = RunCommand(command=JobRun(name=args.name), trigger="manual")
        return await follow(args, settings, subjects.check_project(args.project), command)
    jobs = await asyncio.to_thread(_jobs, settings, args.project)
    print(f"{'job':24} {'command':36} {'schedule':24} triggers")
    for job in jobs:
        schedule = job["schedule"]
        when = f"{schedule['cron']} ({schedule['state']})" if schedule else "-"
        print(f"{job['name']:24} {_described(job['spec']):36} {when:24} {_triggers(job['spec'])}")
    return 0


def _triggers(spec: dict) -> str:
    found = [f"on {r}" for r in spec.get("on_relation", [])]
    after = spec.get("after")
    if after:
        found.append(f"after {after['job']} ({after.get('outcome', 'any')})")
    return ", ".join(found) or "-"


def _schedule_problem(args, settings: Settings) -> str | None:
    """Why `schedule add` may not save anything: its cron, or its time zone."""
    refused = interval_problem(args.cron, settings.schedule_min_interval_seconds)
    if refused or not args.tz:
        return refused
    try:
        check_time_zone(args.tz)
    except ValueError as exc:
        return f"{exc}, or leave --tz out for UTC"
    return None


async def cmd_schedule(args, settings: Settings) -> int:
    if args.schedule_cmd == "add":
        # Checked before the job is saved: a refused schedule leaves nothing behind.
        refused = _schedule_problem(args, settings)
        if refused:
            print(f"schedule of job {args.name} refused: {refused}", file=sys.stderr)
            return EXIT_REFUSED
        if any(getattr(args, option) not in (None, False, []) for option in args.dbt_options):
            saved = await _send(
                settings, args.project, JobCommand(action="save", name=args.name, job=_spec(args))
            )
            if saved:
                return saved
        command = JobCommand(action="schedule", name=args.name, cron=args.cron, tz=args.tz)
        return await _send(settings, args.project, command)
    if args.schedule_cmd in _SCHEDULE_ACTIONS:
        action = _SCHEDULE_ACTIONS[args.schedule_cmd]
        return await _send(settings, args.project, JobCommand(action=action, name=args.name))
    jobs = await asyncio.to_thread(_jobs, settings, args.project)
    print(f"{'job':24} {'schedule':20} {'tz':16} {'state':8} {'fires':>5}  next fire")
    for job in jobs:
        s = job["schedule"]
        if s:
            print(
                f"{job['name']:24} {s['cron']:20} {s['tz'] or 'UTC':16} {s['state']:8}"
                f" {s['fires']:>5}  {s['next_at'] or '-'}"
            )
    return 0

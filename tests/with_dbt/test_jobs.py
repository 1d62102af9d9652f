"""Saved jobs and their schedules on one real stack: a job's runs carry its name and
trigger everywhere a run is shown; a JetStream message schedule fires the job's run with
no jetdbt process keeping time, across a restart of every jetdbt service, none lost or
doubled, and stops when paused; the due times missed while the NATS server is down fire
once when it returns."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime

import aiohttp
import msgspec
import pytest
from jetdbt.projections.replay import replay
from jetdbt.services.cli import client
from jetdbt.services.runner.facts import jobs
from jetdbt.services.runner.facts.jobs import check_schedules_supported
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import (
    CommandRejected,
    JobCommand,
    JobRun,
    JobSpec,
    RunCommand,
    decode_job,
)

from tests.support.helpers import auth_headers, deploy_and_wait, get_json, jetdbt, wait_for
from tests.support.paths import EXAMPLE
from tests.support.recorded_log import settled
from tests.support.schedule_fires import (
    SPEC,
    at,
    events,
    fires,
    one_run_per_fire,
    paused,
    scheduled,
)

pytestmark = pytest.mark.dbt

PROJECT = "jaffle_shop"
EVERY = 2  # seconds between fires


@pytest.mark.timeout(900)
async def test_a_job_runs_labelled_and_its_schedule_fires_across_a_restart(stack, settings):
    await deploy_and_wait(stack.bus, EXAMPLE, PROJECT)
    # Saved by the CLI as docs/guide.md shows it.
    saved = await jetdbt(
        stack,
        *("job", "save", "ops", "--project", PROJECT, "--command", "run-operation"),
        *("--macro", "cents_to_dollars", "--macro-args", "{column_name: amount}"),
    )
    assert saved.returncode == 0 and "job ops: saved" in saved.stdout, saved.stderr
    job = await jobs.job_of(stack.bus, PROJECT, "ops")
    assert msgspec.convert(job.spec, JobSpec) == SPEC

    # Run now, by the CLI's door (manual) and the API's (api): each says job and trigger.
    manual = await client.run(stack.bus, PROJECT, RunCommand(command=JobRun(name="ops")))
    assert manual.result.status == "passed", manual.result.error
    assert manual.result.mode == "run_operation"
    url = f"{stack.api_url}/v1/projects/{PROJECT}/jobs/ops/runs"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, headers=auth_headers(url)) as resp,
    ):
        assert resp.status == 202, await resp.text()
        via_api = (await resp.json())["run_id"]

    async def shown(run_id):
        status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
        return body if status == 200 and body["status"] == "passed" else None

    assert (await wait_for(lambda: shown(manual.run_id)))["trigger"] == "manual"
    api_run = await wait_for(lambda: shown(via_api), timeout=120)
    assert (api_run["job"], api_run["trigger"]) == ("ops", "api")
    status = await jetdbt(stack, "status", via_api)
    assert re.search(r"job: +ops\n", status.stdout), status.stdout
    assert re.search(r"trigger: +api\n", status.stdout), status.stdout

    missing = await client.run(stack.bus, PROJECT, RunCommand(command=JobRun(name="nope")))
    assert isinstance(missing, ev.RunRefused) and "has no job 'nope'" in missing.reason
    bad = JobCommand(action="schedule", name="ops", cron="every day at noon")
    refused = await client.job(stack.bus, PROJECT, bad)
    assert isinstance(refused, ev.JobRefused) and "6 fields" in refused.reason

    # The schedule, from the CLI as docs/guide.md shows it.
    added = await jetdbt(
        stack, "schedule", "add", "ops", "--project", PROJECT, "--cron", f"@every {EVERY}s"
    )
    assert added.returncode == 0, added.stderr
    await wait_for(lambda: _at_least(stack.bus.js, 2), timeout=60)

    # Every jetdbt service stops; the server keeps firing, and the commands stream sources
    # each fire from DBT_SCHEDULES.
    await stack.stop()
    down_from = len(await _fires_of(stack.settings))
    await asyncio.sleep(3 * EVERY)
    restarted = await Stack(settings).start()
    try:
        await wait_for(lambda: _at_least(restarted.bus.js, down_from + 4), timeout=90)
        found = await paused(restarted.bus, PROJECT, "ops", EVERY)
        await asyncio.sleep(2 * EVERY)
        assert len(await fires(restarted.bus.js, PROJECT)) == len(found), "fired while paused"

        # One run per fire, none lost, none doubled, each labelled with the job.
        await one_run_per_fire(restarted.bus.js, "ops", found)
        fired = await events(restarted.bus.js, ev.ScheduleFired)
        fired += await events(restarted.bus.js, ev.ScheduleCoalesced)
        assert len(fired) == len(found) and all(f.next_at for f in fired)
        # Fires came while no jetdbt service ran, and were run (or joined the run before) after
        # the restart.
        assert len(found) > down_from + 1

        async def listed():
            status, body = await get_json(f"{restarted.api_url}/v1/projects/{PROJECT}/jobs")
            job = body["jobs"][0] if status == 200 and body["jobs"] else None
            schedule = job and job["schedule"]
            return schedule if schedule and schedule["fires"] == len(found) else None

        schedule = await wait_for(listed, timeout=60)
        assert (schedule["state"], schedule["cron"]) == ("paused", f"@every {EVERY}s")
        listing = await jetdbt(restarted, "schedule", "list", "--project", PROJECT)
        assert "ops" in listing.stdout and "paused" in listing.stdout, listing.stdout
        jobs_listed = await jetdbt(restarted, "job", "list", "--project", PROJECT)
        assert "run operation" in jobs_listed.stdout, jobs_listed.stdout
        # The jobs and schedules (fires counted) and the runs' job and trigger rebuild from
        # the log with no difference.
        await settled(restarted)
        report = await replay(restarted.bus, restarted.database_url, restarted.settings.schema)
        assert {"jobs", "job_schedules", "runs"} <= {t.table for t in report.tables}
        assert report.differences == 0, [d for t in report.tables for d in t.shown]
        resumed = await client.job(restarted.bus, PROJECT, JobCommand(action="resume", name="ops"))
        assert isinstance(resumed, ev.ScheduleSaved) and resumed.state == "active"
        removed = await client.job(restarted.bus, PROJECT, JobCommand(action="delete", name="ops"))
        assert isinstance(removed, ev.JobDeleted)
    finally:
        await restarted.stop()


async def _at_least(js, count: int) -> bool:
    return len(await fires(js, PROJECT)) >= count


async def _fires_of(settings) -> list:
    from jetdbt.shared.bus.connection import connect

    bus = await connect(settings.nats_url, "test")
    try:
        return await fires(bus.js, PROJECT)
    finally:
        await bus.close()


NATS_DOWN = 4 * EVERY + 1  # seconds the server is away: four due times pass meanwhile


@pytest.mark.timeout(600)
async def test_fires_due_while_the_nats_server_is_down_become_one_fire_when_it_returns(
    stack, nats_server
):
    """The server holds both the schedule and the stream, so nothing can fire while it is
    down. Stopped as `jetdbt down` or an orchestrator stops it and started again, it fires
    once for every due time it missed, at once, then keeps the schedule's cadence; that
    fire is one run like any other."""
    await scheduled(stack.bus, PROJECT, "ops", EVERY)
    await wait_for(lambda: _at_least(stack.bus.js, 2), timeout=60)
    await asyncio.to_thread(nats_server.stop)
    down_at = time.time()
    await asyncio.sleep(NATS_DOWN)
    up_at = time.time()
    await asyncio.to_thread(nats_server.start)

    async def fired_since_return():
        return len([f for f in await fires(stack.bus.js, PROJECT) if at(f) > up_at]) >= 3

    await wait_for(fired_since_return, timeout=60)
    found = await paused(stack.bus, PROJECT, "ops", EVERY)
    since = [at(f) - up_at for f in found if at(f) > down_at]
    assert since[0] >= 0, "a fire while the server was down"
    assert since[0] < 1.5, f"the missed due times fired {since[0]:.2f}s after the restart"
    # One fire for the four due times missed, not four: the next comes on the cadence,
    # rounded to the second (1.5 to 2.5 s after that fire, as measured).
    assert since[1] - since[0] > 1, since
    await one_run_per_fire(stack.bus.js, "ops", found)


def test_a_server_before_2_14_is_refused_naming_its_version():
    class Version(msgspec.Struct):
        major: int
        minor: int
        patch: int

    assert "this server is 2.10.29" in check_schedules_supported(Version(2, 10, 29))
    assert check_schedules_supported(Version(2, 15, 1)) is None


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'{"action": "save", "name": "Bad Name", "job": {}}', "job name 'Bad Name' is invalid"),
        (b'{"action": "save", "name": "j"}', "a job is given with action save"),
        (b'{"action": "run", "name": "j"}', "`$.action`"),
        (b'{"action": "pause", "name": "j", "cron": "* * * * * *"}', "only then"),
        (b'{"action": "schedule", "name": "j", "cron": "@every 1s\\r\\nX: y"}', "printable"),
        (b'{"action": "schedule", "name": "j", "cron": "@every 1s", "tz": "../etc"}', "tz is"),
        (b'{"action": "schedule", "name": "j", "cron": "@every 1s", "tz": "Mars/Base"}', "tz is"),
        (
            b'{"action": "save", "name": "j", "job": {"command": {"label": "job", "name": "k"}}}',
            "`$.job.command.label`",
        ),
    ],
)
def test_a_malformed_job_command_is_refused_naming_why(body, reason):
    with pytest.raises(CommandRejected, match=re.escape(reason)):
        decode_job(body)


class _Fire:
    """A fire as the runner reads it: only its headers matter here."""

    def __init__(self, next_due: str):
        self.headers = {jobs.NEXT: next_due}


async def test_a_due_time_fired_again_is_not_run_again(stack):
    """A server restored from an older schedule state fires a due time again, as a new
    message: the runner knows it by the due time it names, the one the job's last fire
    named, and starts no second run; a redelivery of the fire itself goes on."""
    recorded = ev.ScheduleFired(
        project="repeat_shop",
        job="ops",
        run_id="c40",
        fired_at=datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC),
        next_at=datetime(2026, 12, 1, 10, 0, 2, tzinfo=UTC),
        command_seq=40,
    )
    await stack.bus.publish(recorded)
    run = RunCommand(command=JobRun(name="ops"))
    same, later = _Fire("2026-12-01T10:00:02Z"), _Fire("2026-12-01T10:00:04Z")
    assert await jobs.repeated_fire(stack.bus, "repeat_shop", run, same, 41)
    assert not await jobs.repeated_fire(stack.bus, "repeat_shop", run, same, 40)
    assert not await jobs.repeated_fire(stack.bus, "repeat_shop", run, later, 42)
    assert not await jobs.repeated_fire(stack.bus, "other_shop", run, same, 41)

"""Saved jobs and their schedules on one real stack: a job's runs carry its name and
trigger everywhere a run is shown; a JetStream message schedule fires the job's run with
no jetdbt process keeping time, across a restart of every jetdbt service, none lost or
doubled, and stops when paused."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import msgspec
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from projections.replay import replay
from services import client
from services.runner import jobs
from services.runner.jobs import SCHEDULER, check_schedules_supported
from services.stack import Stack
from shared import events as ev
from shared.commands import (
    CommandRejected,
    JobCommand,
    JobRun,
    JobSpec,
    OperationCommand,
    RunCommand,
    decode_job,
)
from tests.conftest import EXAMPLE
from tests.helpers import auth_headers, get_json, jetdbt, wait_for
from tests.recorded_log import settled

pytestmark = pytest.mark.dbt

PROJECT = "jaffle_shop"
# The cheapest dbt invocation the example has: a macro that only renders SQL.
SPEC = JobSpec(
    command=OperationCommand(macro="cents_to_dollars", macro_args={"column_name": "amount"})
)
EVERY = 2  # seconds between fires


async def _all(js, stream: str, subject: str) -> list:
    """Every message on `subject` in `stream`, in order."""
    info = await js.stream_info(stream)
    if not info.state.messages:
        return []
    sub = await js.pull_subscribe(
        subject, stream=stream, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    found = []
    try:
        while True:
            try:
                found += await sub.fetch(200, timeout=1)
            except TimeoutError:
                return found
    finally:
        await sub.unsubscribe()


async def _fires(js) -> list:
    """The run commands the server published for a schedule (the header no client may set)."""
    msgs = await _all(js, "DBT_COMMANDS", f"dbt.cmd.run.{PROJECT}.>")
    return [m for m in msgs if (m.headers or {}).get(SCHEDULER)]


async def _events(js, kind: type) -> list:
    return [
        e
        for m in await _all(js, "DBT_EVENTS", "dbt.evt.>")
        if isinstance(e := ev.decode(m.data), kind)
    ]


@pytest.mark.timeout(900)
async def test_a_job_runs_labelled_and_its_schedule_fires_across_a_restart(stack, settings):
    _, deployed = await client.deploy(stack.bus, EXAMPLE, PROJECT)
    assert isinstance(deployed, ev.Deployed), deployed
    # Saved by the CLI as the README shows it.
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
    assert manual.result.command == "run_operation"
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
    assert isinstance(refused, ev.JobRefused) and "pattern is invalid" in refused.reason

    # The schedule, from the CLI as the README shows it.
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
        paused = await client.job(restarted.bus, PROJECT, JobCommand(action="pause", name="ops"))
        assert isinstance(paused, ev.ScheduleSaved) and paused.state == "paused"
        await asyncio.sleep(EVERY + 1)  # a fire already on its way may still land
        fires = await _fires(restarted.bus.js)
        await asyncio.sleep(2 * EVERY)
        assert len(await _fires(restarted.bus.js)) == len(fires), "fired while paused"

        async def all_recorded():
            requested = [
                e
                for e in await _events(restarted.bus.js, ev.RunRequested)
                if e.trigger == "schedule"
            ]
            return requested if len(requested) >= len(fires) else None

        requested = await wait_for(all_recorded, timeout=300)
        # One run per fire, none lost, none doubled, each labelled with the job.
        assert sorted(e.command_seq for e in requested) == sorted(
            m.metadata.sequence.stream for m in fires
        )
        assert {e.job for e in requested} == {"ops"}
        assert len({e.run_id for e in requested}) == len(fires)
        fired = await _events(restarted.bus.js, ev.ScheduleFired)
        assert len(fired) == len(fires) and all(f.next_at for f in fired)
        # Fires came while no jetdbt service ran, and were run after the restart.
        assert len(fires) > down_from + 1

        async def listed():
            status, body = await get_json(f"{restarted.api_url}/v1/projects/{PROJECT}/jobs")
            job = body["jobs"][0] if status == 200 and body["jobs"] else None
            schedule = job and job["schedule"]
            return schedule if schedule and schedule["fires"] == len(fires) else None

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
    return len(await _fires(js)) >= count


async def _fires_of(settings) -> list:
    from shared.bus import connect

    bus = await connect(settings.nats_url, "test")
    try:
        return await _fires(bus.js)
    finally:
        await bus.close()


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

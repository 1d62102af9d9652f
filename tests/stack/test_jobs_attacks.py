"""Issue 30's surface attacked: saved jobs and their message schedules, and signed webhooks,
on one stack `jetdbt up` runs (its nats-server with the generated accounts), two teams.

Team beta has an external system `sys_b` granted `beta_shop` alone; team alpha owns `alpha_shop`.
Each test is one finding of a review of jobs, schedules and webhooks (issue 30), and would
pass on the code before it only if the finding were wrong. Run facts are published by the
operator's user here, as a runner would, so no test needs dbt.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
import uuid
from datetime import UTC, datetime

import aiohttp
import msgspec
import pytest
import pytest_asyncio
from aiohttp import web
from jetdbt.services.cli import client
from jetdbt.services.notifier.service import HOOK_BACKLOG
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.jobs import hook_reasons, webhooks
from jetdbt.shared.process.config import load
from nats import errors as nats_errors
from nats.js.errors import NotFoundError

from tests.support.access_site import cli, system
from tests.support.helpers import auth_headers, get_json, use_token, wait_for
from tests.support.relation_facts import relation_written

pytestmark = pytest.mark.asyncio(loop_scope="module")

ALPHA, BETA = "alpha_shop", "beta_shop"


class Site(msgspec.Struct, kw_only=True):
    stack: object
    home: object
    sys_b: object  # team beta's system's NATS connection
    violations: list  # the permission violations its server reported


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("jobs_attacks")
    settings = load(
        {
            "JETDBT_HOME": str(root / "home"),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
            # Any public host, and this machine's receivers the tests start, listed by address.
            "JETDBT_WEBHOOK_HOSTS": "*,127.0.0.1",
            "JETDBT_WEBHOOK_ATTEMPTS": "2",
            "JETDBT_WEBHOOK_RETRY_SECONDS": "0.2",
        }
    )
    stack = await Stack(settings).start()
    stack.write_stack_file()
    use_token(stack.api_url, stack.admin_token)
    found = Site(stack=stack, home=settings.home, sys_b=None, violations=[])
    code, out, err = await cli(
        found, "access", "add-system", "sys_b", "--team", "beta", "--project", BETA
    )
    assert code == 0, err
    password = out.split("password (shown once): ")[1].split()[0]
    found.sys_b, found.violations = await system(found, "sys_b", password)
    yield found
    await found.sys_b.close()
    await stack.stop()


async def _fact(stack, subject: str):
    try:
        return ev.decode((await stack.bus.js.get_last_msg(EVENTS, subject)).data)
    except NotFoundError:
        return None


async def test_a_system_cannot_plant_a_schedule_that_commands_another_teams_project(site):
    """A command's headers are anyone's to set: sys_b sends one on its own run subject as a
    schedule whose target is alpha's job subject under a principal nobody has. Were it
    stored, the server would publish the fire there itself, past every NATS permission.
    DBT_COMMANDS holds no schedule (they live in DBT_SCHEDULES, which only runners write):
    the server refuses it, and alpha's project gains no job."""
    due = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    planted = {"action": "save", "name": "planted", "job": {"command": {"label": "build"}}}
    await site.sys_b.publish(
        subjects.command("run", BETA, "sys_b"),
        json.dumps(planted).encode(),
        headers={
            "Nats-Schedule": f"@at {due}",
            "Nats-Schedule-Target": subjects.command("job", ALPHA, "nobody"),
        },
    )
    await site.sys_b.flush()
    saved = subjects.job_event(ALPHA, "planted", "saved")
    with pytest.raises(TimeoutError):
        await wait_for(lambda: _fact(site.stack, saved), timeout=8, interval=0.2)


class Receiver:
    """A real HTTP server on every interface: `mode` says how it answers a POST (`ok`,
    `endless`: 200 then a body that never ends, `hang`: never answers)."""

    def __init__(self, mode: str = "ok"):
        self.mode, self.got = mode, []
        self.released = asyncio.Event()  # a hanging answer ends when the test is done

    async def start(self) -> int:
        app = web.Application()
        app.router.add_post("/hook", self._post)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "0.0.0.0", 0).start()
        return self.runner.addresses[0][1]

    async def stop(self) -> None:
        self.released.set()
        await self.runner.cleanup()

    async def _post(self, request: web.Request) -> web.StreamResponse:
        self.got.append((time.monotonic(), await request.read()))
        if self.mode == "hang":
            await self.released.wait()
        if self.mode == "endless":
            resp = web.StreamResponse()
            await resp.prepare(request)
            chunk = b"x" * 65536
            while True:
                await resp.write(chunk)
        return web.Response(text="ok")


async def _add(site, project: str, name: str, url: str) -> tuple[int, dict]:
    api = f"{site.stack.api_url}/v1/projects/{project}/hooks"
    body = {"action": "add", "name": name, "url": url, "on": ["start"]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(api, json=body, headers=auth_headers(api)) as resp,
    ):
        return resp.status, await resp.json()


async def _remove(site, project: str, name: str) -> None:
    api = f"{site.stack.api_url}/v1/projects/{project}/hooks"
    body = {"action": "remove", "name": name}
    async with (
        aiohttp.ClientSession() as session,
        session.post(api, json=body, headers=auth_headers(api)) as resp,
    ):
        assert resp.status in (200, 404), await resp.text()


async def _run_starts(site, project: str) -> str:
    """A run's first start, as a runner records it: every hook of the project listening."""
    run_id = uuid.uuid4().hex
    await site.stack.bus.publish(
        ev.RunStarted(project=project, run_id=run_id, attempt=1, version="v1")
    )
    return run_id


async def _deliveries(site, project: str, hook: str) -> list[dict]:
    url = f"{site.stack.api_url}/v1/projects/{project}/hooks/{hook}/deliveries"
    status, body = await get_json(url)
    assert status == 200, body
    return body["deliveries"]


LOOPBACK_SPELLINGS = [
    "2130706433", "0x7f000001", "127.1", "0177.0.0.1", "0", "localhost.", "[::ffff:7f00:1]",
    "[::7f00:1]", "[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::1]", "224.0.0.1", "[ff02::1]",
]  # fmt: skip


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
async def test_a_hook_url_spelling_a_loopback_address_otherwise_is_refused(site, host):
    """`*` allows public hosts only; an address spelled as one number, in hex or octal, with
    parts left out, or carried in IPv6 (mapped, compatible, NAT64, 6to4) is still loopback
    or metadata to what posts; multicast is no receiver."""
    status, body = await _add(site, ALPHA, f"sp{abs(hash(host)) % 10**6}", f"http://{host}/hook")
    assert status == 400, body
    assert "JETDBT_WEBHOOK_HOSTS" in body["error"] or "address" in body["error"], body


async def test_a_hook_whose_name_resolves_to_loopback_posts_nothing_there(site):
    """A name is not an address: this machine's own host name passes `*` when the hook is
    added, and resolves to a loopback address when it posts. The notifier refuses to connect
    to an address the operator did not list, every time it resolves the name (a DNS answer
    that changes after the check changes nothing)."""
    receiver = Receiver()
    port = await receiver.start()
    try:
        name = socket.gethostname()
        if ipaddress.ip_address(socket.getaddrinfo(name, port)[0][4][0]).is_global:
            pytest.skip(f"host name {name} resolves to a public address here")
        status, body = await _add(site, ALPHA, "dns", f"http://{name}:{port}/hook")
        assert status == 201, body
        await _run_starts(site, ALPHA)

        async def dead():
            found = await _deliveries(site, ALPHA, "dns")
            return [d for d in found if d["state"] == "dead"]

        (last,) = await wait_for(dead, timeout=30, interval=0.2)
        assert last["error"] == hook_reasons.NOT_ALLOWED, last
        assert receiver.got == []
    finally:
        await _remove(site, ALPHA, "dns")
        await receiver.stop()


async def test_a_receiver_that_never_stops_answering_is_not_read_to_its_end(site):
    """A 2xx's status is all a delivery needs: a receiver whose body never ends (or is
    huge) neither fills the notifier's memory nor turns a delivered hook into a timeout."""
    receiver = Receiver("endless")
    port = await receiver.start()
    try:
        status, body = await _add(site, ALPHA, "endless", f"http://127.0.0.1:{port}/hook")
        assert status == 201, body
        await _run_starts(site, ALPHA)
        (first,) = await wait_for(
            lambda: _deliveries(site, ALPHA, "endless"), timeout=30, interval=0.2
        )
        assert (first["attempt"], first["status"], first["state"]) == (1, 200, "delivered"), first
    finally:
        await _remove(site, ALPHA, "endless")
        await receiver.stop()


async def test_one_teams_hanging_receiver_delays_no_other_teams_hook(site):
    """The notifier posts each hook's deliveries apart: alpha's receiver that never answers
    (each attempt waits out its timeout, then backs off) holds up that hook alone, never
    beta's, told of a run that started just after; however many of alpha's runs start
    meanwhile (more than the consumer's max_ack_pending, 64): past HOOK_BACKLOG waiting, a
    delivery of the stuck hook is given up at once, a dead letter saying why."""
    hanging, quick = Receiver("hang"), Receiver()
    slow_port, quick_port = await hanging.start(), await quick.start()
    try:
        assert (await _add(site, ALPHA, "hangs", f"http://127.0.0.1:{slow_port}/hook"))[0] == 201
        assert (await _add(site, BETA, "quick", f"http://127.0.0.1:{quick_port}/hook"))[0] == 201
        await _run_starts(site, ALPHA)
        await wait_for(lambda: _true(hanging.got), timeout=30, interval=0.05)
        for _ in range(70):
            await _run_starts(site, ALPHA)
        sent = time.monotonic()
        await _run_starts(site, BETA)
        await wait_for(lambda: _true(quick.got), timeout=60, interval=0.05)
        assert quick.got[0][0] - sent < 5, "beta's hook waited for alpha's receiver"

        ended: set[str] = set()

        async def given_up():
            found = await _deliveries(site, ALPHA, "hangs")
            given = {d["delivery_id"] for d in found if d["error"] == hook_reasons.BACKLOG_FULL}
            # A delivery that gave up its attempts meanwhile (a loaded machine starts the 70
            # runs slower than a timeout) freed its turn for one that came after it.
            ended.update(
                d["delivery_id"] for d in found
                if d["state"] != "retrying" and d["delivery_id"] not in given
            )  # fmt: skip
            return len(given) >= 70 - HOOK_BACKLOG - 1 - len(ended)

        await wait_for(given_up, timeout=60, interval=0.2)
        # One delivery tried at a time (each up to WEBHOOK_ATTEMPTS=2); the next wait their turn.
        assert len(hanging.got) <= 2 * len(ended) + 2, (len(hanging.got), ended)
    finally:
        await _remove(site, ALPHA, "hangs")
        await _remove(site, BETA, "quick")
        await hanging.stop()
        await quick.stop()


async def _true(value):
    return bool(value)


@pytest.mark.parametrize(
    "subject",
    [subjects.schedule_definition(ALPHA, "nightly"), subjects.hook_control(ALPHA)],
    ids=["schedule definition", "hook request"],
)
async def test_a_system_reaches_neither_schedules_nor_hook_requests(site, subject):
    """Only a runner stores a schedule's definition (dbt.sched.>), and only the API's account
    and the operator ask the notifier to add a hook (whose answer holds its secret)."""
    with pytest.raises((nats_errors.NoRespondersError, nats_errors.TimeoutError)):
        await site.sys_b.request(subject, b'{"action": "add", "name": "x"}', timeout=0.5)
    assert any(subject in v for v in site.violations), site.violations
    with pytest.raises(NotFoundError):
        await site.stack.bus.js.get_last_msg("DBT_COMMANDS", subject)


FEED = "dbt://main/raw/alpha_feed"


async def test_another_teams_system_cannot_start_runs_by_declaring_writes(site):
    """Alpha's job `feed` runs when dbt://main/raw/alpha_feed is written. Beta's system,
    granted beta_shop alone, may declare writes of that relation as itself (the producer
    rule lets it), but a write wakes only its writer's team's jobs: were it otherwise, beta
    would start runs in alpha's project as often as its share of the log allows."""
    spec = commands.JobSpec(on_relation=[FEED])
    saved = await client.job(
        site.stack.bus, ALPHA, commands.JobCommand(action="save", name="feed", job=spec)
    )
    assert isinstance(saved, ev.JobSaved), saved
    await site.sys_b.publish(subjects.intake_write("sys_b", FEED), relation_written(FEED, "sys_b"))
    await site.sys_b.flush()

    async def started():
        found = await site.stack.bus.last_event(f"dbt.evt.run.{ALPHA}.*.requested")
        return found if getattr(found, "job", "") == "feed" else None

    with pytest.raises(TimeoutError):
        await wait_for(started, timeout=10, interval=0.2)


async def test_a_project_has_at_most_max_hooks(site):
    """Every hook is read for every run's start and end: a team adding hooks without end
    would slow every team's deliveries. Past MAX_HOOKS an add is refused, naming the limit;
    saving one of the project's hooks again is not an add."""
    url = "https://hooks.example.com/crowd"
    for n in range(webhooks.MAX_HOOKS):
        assert (await _add(site, "crowd_shop", f"h{n}", url))[0] == 201
    status, body = await _add(site, "crowd_shop", "one-more", url)
    assert status == 400 and f"{webhooks.MAX_HOOKS} hooks" in body["error"], body
    assert (await _add(site, "crowd_shop", "h0", url + "/again"))[0] == 201

"""Who may do what, on both doors, against the stack `jetdbt up` runs: a nats-server started
with the generated users and permissions, real Postgres, real dbt.

One stack for the module. Team analytics owns `analytics_shop` (a project whose `broken`
model fails), team billing owns `billing_shop`; alice and mallory are runners of
analytics, vera its viewer, bob a runner of billing, and `ingest` an external system.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from datetime import timedelta

import nats
import pytest
import pytest_asyncio
from jetdbt.services.access.local import access_dir, nats_logins
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import contract, subjects
from jetdbt.shared.bus.streams import COMMANDS, EVENTS, HOOK_SECRETS
from jetdbt.shared.identity import principals
from jetdbt.shared.process.config import load
from nats.errors import Error as NatsError
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from tests.support.access_site import (
    ANALYTICS,
    BILLING,
    Site,
    call,
    cli,
    finished,
    system,
    tiny_project,
)
from tests.support.helpers import deploy_and_wait, wait_for

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("access")
    settings = load(
        {
            "JETDBT_HOME": str(root / "home"),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
        }
    )
    stack = await Stack(settings).start()
    stack.write_stack_file()
    tokens, ids = {}, {}
    for who, team, role, pattern in [
        ("ann", "analytics", "deployer", "analytics_*"),
        ("alice", "analytics", "runner", "analytics_*"),
        ("mallory", "analytics", "runner", "analytics_*"),
        ("vera", "analytics", "viewer", "*"),
        ("bob", "billing", "runner", "billing_*"),
        ("bill", "billing", "deployer", "billing_*"),
    ]:
        token, bearer = await principals.create_token(
            stack.bus, principal=who, team=team, role=role, project=pattern
        )
        tokens[who], ids[who] = bearer, token.id
    for who, name in [("ann", ANALYTICS), ("bill", BILLING)]:
        await deploy_and_wait(stack.bus, tiny_project(root / name, name), name, requested_by=who)
    yield Site(stack=stack, home=settings.home, tokens=tokens, token_ids=ids)
    await stack.stop()


async def test_without_a_valid_token_every_v1_route_is_401(site):
    app = site.stack._site_runner.app
    checked = 0
    for route in app.router.routes():
        path = route.resource.canonical
        if route.method == "HEAD" or not path.startswith(("/v1/", "/metrics")):
            continue
        concrete = path.replace("{key}", "x").replace("{run_id}", "r1")
        concrete = concrete.replace("{project}", ANALYTICS).replace("{unique_id}", "model.p.m")
        concrete = concrete.replace("{name}", "manifest.json").replace("{job}", "ops")
        concrete = concrete.replace("{hook}", "pager")
        status, body = await call(site, route.method, concrete)
        assert status == 401, (route.method, path, body)
        assert "Authorization: Bearer" in body["error"]
        checked += 1
    assert checked >= 8
    status, _ = await call(site, "GET", "/healthz")
    assert status == 200
    bad = {"Authorization": "Bearer jdbt_0123456789ab_nope"}
    status, body = await call(site, "GET", f"/v1/projects/{ANALYTICS}/runs", headers=bad)
    assert status == 401 and "unknown or revoked" in body["error"]
    wrong_secret = site.tokens["alice"][:-4] + "AAAA"
    status, body = await call(
        site, "GET", "/v1/projections", headers={"Authorization": f"Bearer {wrong_secret}"}
    )
    assert status == 401


async def test_an_expired_or_revoked_token_is_refused_at_its_next_request(site):
    bus = site.stack.bus
    _, expired = await principals.create_token(
        bus, principal="eve", team="analytics", role="viewer", expires_in=timedelta(seconds=-1)
    )
    status, body = await call(
        site, "GET", "/v1/projections", headers={"Authorization": f"Bearer {expired}"}
    )
    assert status == 401 and "expired" in body["error"]
    token, bearer = await principals.create_token(
        bus, principal="eve", team="analytics", role="viewer"
    )
    auth = {"Authorization": f"Bearer {bearer}"}
    assert (await call(site, "GET", "/v1/projections", headers=auth))[0] == 200
    assert await principals.revoke_token(bus, token.id)
    assert (await call(site, "GET", "/v1/projections", headers=auth))[0] == 401


async def test_roles_and_teams_scope_every_route(site):
    build = {"command": {"label": "build"}}
    status, body = await call(site, "POST", f"/v1/projects/{ANALYTICS}/runs", "vera", json=build)
    assert status == 403 and "needs role 'runner'" in body["error"]
    assert (await call(site, "GET", f"/v1/projects/{ANALYTICS}/runs", "vera"))[0] == 200
    # Team billing can neither read nor run analytics' project, and the other way round.
    for path in ("runs", "deploys", "retry-state", "environments", "graph"):
        status, body = await call(site, "GET", f"/v1/projects/{ANALYTICS}/{path}", "bob")
        assert status == 403, (path, body)
    status, body = await call(site, "POST", f"/v1/projects/{ANALYTICS}/runs", "bob", json=build)
    assert status == 403 and "billing_*" in body["error"]
    status, body = await call(site, "GET", f"/v1/projects/{BILLING}/deploys", "alice")
    assert status == 403
    # A viewer whose pattern covers every project still sees only its team's.
    status, body = await call(site, "GET", f"/v1/projects/{BILLING}/runs", "vera")
    assert status == 403 and "team 'analytics'" in body["error"]
    status, body = await call(site, "GET", "/v1/dead-letters", "vera")
    assert status == 403 and "'admin'" in body["error"]
    status, body = await call(site, "GET", f"/v1/projects/{BILLING}/deploys", "bob")
    assert status == 200 and body["deploys"][0]["team"] == "billing"


async def test_only_alice_resumes_alices_failed_run(site):
    build = {"command": {"label": "build"}}
    status, body = await call(site, "POST", f"/v1/projects/{ANALYTICS}/runs", "alice", json=build)
    assert status == 202, body
    failed = await finished(site, body["run_id"])
    assert failed["status"] == "failed"
    assert failed["requested_by"] == "alice" and failed["team"] == "analytics"
    assert failed["door"] == f"api token {site.token_ids['alice']}"
    # Team billing cannot read the run either (its project is analytics').
    assert (await call(site, "GET", f"/v1/runs/{failed['run_id']}", "bob"))[0] == 403

    retry = {"command": {"label": "retry", "dbt_retry_job": failed["run_id"]}}
    claimed = {**retry, "requested_by": "alice"}
    url = f"/v1/projects/{ANALYTICS}/runs"
    status, body = await call(site, "POST", url, "mallory", json=claimed)
    assert status == 400 and "requested_by" in body["error"]
    status, body = await call(site, "POST", url, "mallory", json=retry)
    assert status == 202
    refused = await finished(site, body["run_id"], "mallory")
    assert refused["status"] == "refused" and refused["requested_by"] == "mallory"
    assert "'mallory'" in refused["refused_reason"]

    status, body = await call(site, "POST", url, "alice", json=retry)
    assert status == 202
    resumed = await finished(site, body["run_id"])
    assert resumed["status"] != "refused", resumed["refused_reason"]
    assert resumed["requested_by"] == "alice"
    assert [n["unique_id"] for n in resumed["nodes"]] == [f"model.{ANALYTICS}.broken"]


async def _stored(site: Site, subject: str, data: bytes) -> bool:
    try:
        return (await site.stack.bus.js.get_last_msg(EVENTS, subject)).data == data
    except NotFoundError:
        return False


async def test_an_external_system_publishes_only_its_own_commands(site):
    code, out, err = await cli(
        site, "access", "add-system", "ingest", "--team", "analytics", "--project", ANALYTICS
    )
    assert code == 0, err
    password = out.split("password (shown once): ")[1].split()[0]
    assert (access_dir(site.home) / "nats-users.json").stat().st_mode & 0o777 == 0o600
    assert (site.home / "stack.json").stat().st_mode & 0o777 == 0o600  # a URL may log in
    nc, violations = await system(site, "ingest", password)
    try:
        forged = [
            subjects.run_event(ANALYTICS, "forged1", "finished"),
            subjects.state_event(ANALYTICS, "main", "published"),
            subjects.deploy_event(ANALYTICS, "deployed"),
            subjects.command("run", ANALYTICS, "alice"),  # another principal's subject
        ]
        for subject in forged:
            await nc.publish(subject, b'{"forged": true}')
        await nc.flush()
        await wait_for(lambda: asyncio.sleep(0, len(violations) >= len(forged)), timeout=10)
        for subject in forged:
            assert any("permissions violation" in v and subject in v for v in violations), subject

        js = nc.jetstream()
        run_id = f"ing-{uuid.uuid4().hex[:8]}"
        body = {"command": {"label": "build", "select": ["fine"]}, "run_id": run_id}
        ack = await js.publish(
            subjects.command("run", ANALYTICS, "ingest"), json.dumps(body).encode()
        )
        assert ack.stream == COMMANDS
    finally:
        await nc.close()

    run = await finished(site, run_id)
    assert (run["status"], run["requested_by"], run["team"]) == ("passed", "ingest", "analytics")
    assert run["door"] == "nats user ingest"
    code, out, err = await cli(site, "audit", "run", run_id)
    assert code == 0, err
    assert "requested by ingest (team analytics, door nats user ingest)" in out

    # Nothing forged reached the log, so nothing was projected.
    for subject in forged[:3]:
        assert not await _stored(site, subject, b'{"forged": true}'), subject
    assert (await call(site, "GET", "/v1/runs/forged1", "alice"))[0] == 404
    status, body = await call(site, "GET", f"/v1/projects/{ANALYTICS}/environments", "alice")
    assert status == 200 and all(e["run_id"] != "forged1" for e in body["environments"])


async def test_a_systems_user_acts_only_within_its_team(site):
    """NATS lets the user publish for the project it names; the runner still refuses a run
    or a cancel in another team's project, as the API would refuse a token of that team."""
    code, out, err = await cli(
        site, "access", "add-system", "ledger", "--team", "analytics", "--project", BILLING
    )
    assert code == 0, err
    password = out.split("password (shown once): ")[1].split()[0]
    nc, _ = await system(site, "ledger", password)
    try:
        js = nc.jetstream()
        body = {"command": {"label": "build", "select": ["fine"]}, "run_id": "ledger-1"}
        run = await js.publish(
            subjects.command("run", BILLING, "ledger"), json.dumps(body).encode()
        )
        cancel = await js.publish(
            subjects.command("cancel", BILLING, "ledger"), json.dumps({"run_id": "x1"}).encode()
        )
    finally:
        await nc.close()
    for ack in (run, cancel):
        refused = await wait_for(
            lambda seq=ack.seq: site.stack.bus.last_event(
                subjects.run_event(BILLING, f"c{seq}", "refused")
            ),
            timeout=30,
        )
        assert "belongs to team 'billing'" in refused.reason, refused.reason
    assert (await call(site, "GET", "/v1/runs/ledger-1", "bob"))[0] == 404


async def test_no_service_user_changes_the_event_stream_or_the_runners_consumer(site):
    logins = nats_logins(site.home)
    for user in ("runner", "projector", "api"):
        nc, violations = await system(site, user, logins[user])
        try:
            js = nc.jetstream(timeout=1)
            config = (await js.stream_info(EVENTS)).config
            for change in ({"max_age": 1.0}, {"subjects": ["dbt.evt.>", "dbt.other.>"]}):
                with pytest.raises(nats.errors.TimeoutError):  # denied: the server never hears it
                    await js.update_stream(dataclasses.replace(config, **change))
            with pytest.raises(nats.errors.TimeoutError):
                await js.delete_consumer(COMMANDS, "runners")
            with pytest.raises(nats.errors.TimeoutError):
                await js.add_stream(StreamConfig(name="EVIL", subjects=["dbt.evil.>"]))
            denied = [
                f"$JS.API.STREAM.UPDATE.{EVENTS}",
                f"$JS.API.CONSUMER.DELETE.{COMMANDS}.runners",
                "$JS.API.STREAM.CREATE.EVIL",
            ]
            if user != "runner":  # only runners publish facts
                fact = subjects.run_event(ANALYTICS, "x", "finished")
                await nc.publish(fact, b"{}")
                denied.append(fact)
            await nc.flush()
            for subject in denied:
                seen = await wait_for(
                    lambda s=subject, v=violations: asyncio.sleep(
                        0, any(s.lower() in x.lower() for x in v)
                    ),
                    timeout=10,
                )
                assert seen, (user, subject, violations)
        finally:
            await nc.close()
    js = site.stack.bus.js
    live = (await js.stream_info(EVENTS)).config
    assert live.max_age == 0 and live.subjects == ["dbt.evt.>"]
    assert (await js.consumer_info(COMMANDS, "runners")).config.durable_name == "runners"
    await contract.check(js, contract.load())


async def test_tokens_from_the_cli_are_shown_once_and_listed_without_secrets(site):
    code, out, err = await cli(
        site, "token", "create", "--principal", "zoe", "--team", "analytics",
        "--role", "viewer", "--project", "analytics_*", "--expires", "30d",
    )  # fmt: skip
    assert code == 0, err
    bearer = out.strip().splitlines()[-1]
    assert bearer.startswith("jdbt_")
    auth = {"Authorization": f"Bearer {bearer}"}
    assert (await call(site, "GET", f"/v1/projects/{ANALYTICS}/runs", headers=auth))[0] == 200
    code, listed, _ = await cli(site, "token", "list")
    token_id = bearer.split("_")[1]
    assert code == 0 and token_id in listed and "zoe" in listed
    assert bearer.split("_", 2)[2] not in listed
    assert principals.hash_secret(bearer.split("_", 2)[2]) not in listed
    code, out, _ = await cli(site, "token", "revoke", token_id)
    assert code == 0
    assert (await call(site, "GET", f"/v1/projects/{ANALYTICS}/runs", headers=auth))[0] == 401
    # What `jetdbt up` wrote for the CLI is readable by its owner only.
    assert (access_dir(site.home) / "admin.token").stat().st_mode & 0o777 == 0o600


async def test_hooks_reach_the_notifier_and_only_it_reads_their_secrets(site):
    """A hook request crosses from the API's account to the notifier and back; the hooks'
    bucket is read by the notifier's user alone, never the runner's, the API's or the
    projectors'."""
    path = f"/v1/projects/{ANALYTICS}/hooks"
    body = {"action": "add", "name": "pager", "url": "https://hooks.example.com/x"}
    status, _ = await call(site, "POST", path, "vera", json={**body, "on": ["failure"]})
    assert status == 403  # a viewer
    status, answer = await call(site, "POST", path, "alice", json={**body, "on": ["failure"]})
    assert status == 400 and "JETDBT_WEBHOOK_HOSTS" in answer["error"], answer  # its answer
    kv = await site.stack.bus.js.key_value(HOOK_SECRETS)
    await kv.put("probe.key", b"not for you")
    logins = nats_logins(site.home)
    for user in ("runner", "api", "projector", "notifier"):
        nc, _ = await system(site, user, logins[user])
        try:
            theirs = await nc.jetstream(timeout=2).key_value(HOOK_SECRETS)
            if user == "notifier":
                assert (await theirs.get("probe.key")).value == b"not for you"
            else:
                with pytest.raises((TimeoutError, NatsError)):
                    await theirs.get("probe.key")
        finally:
            await nc.close()


async def test_the_services_themselves_met_no_permission_violation(site):
    """Everything above ran through the generated permissions: the stack's own connections
    (named jetdbt-runner, jetdbt-projector, jetdbt-api) were never refused anything."""
    log = (site.home / "nats" / "nats-server.log").read_text()
    refused = [line for line in log.splitlines() if "Violation" in line and ":jetdbt-" in line]
    assert not refused, "\n".join(refused[:10])

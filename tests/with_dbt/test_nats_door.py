"""The NATS door, attacked: a stack `jetdbt up` runs, its nats-server started with the
generated accounts and permissions, two teams with their people and systems.

Team alpha owns `alpha_shop` (ann deploys, alice runs), team beta owns `beta_shop` (bill
deploys, bea runs, vic views). Each team has an external system granted every project
(`sys_a`, `sys_b`); `dep_a` is alpha's deploying system and `flood` one of beta's that
publishes past its share of the log. Each test is one finding of a review of the NATS
door (issue 26) and would pass on the code before it only if the finding were wrong.

The warehouse `alpha_wh` was granted to teams alpha and beta; bill deployed `beta_wh` on it;
then the operator took beta's grant back and started the stack again (issue 38).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import msgspec
import nats
import pyarrow.parquet as pq
import pytest
import pytest_asyncio
import yaml
from jetdbt.services.access.local import nats_logins
from jetdbt.services.audit.export import export
from jetdbt.services.cli import client
from jetdbt.services.runner.facts.declared_writes import MAX_DECLARED_WRITE_BYTES
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.streams import EVENTS, IDENTITY, INTAKE
from jetdbt.shared.identity import principals
from jetdbt.shared.process.config import load
from nats.js.errors import NotFoundError

from tests.support.access_site import call, cli, finished, system, tiny_project
from tests.support.helpers import deploy_and_wait, not_runners_events, wait_for
from tests.support.paths import GOLDEN
from tests.support.relation_facts import relation_written

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

ALPHA, BETA = "alpha_shop", "beta_shop"
RATE = 40  # EXTERNAL_PUBLISHES_PER_MINUTE of this stack
ON_ALPHA_WH = "beta_wh"  # team beta's project on alpha_wh, deployed while beta was granted it
NOT_GRANTED = "warehouse 'alpha_wh' is not granted to team 'beta'"


class Door(msgspec.Struct, kw_only=True):
    stack: object
    home: Path
    root: Path
    tokens: dict[str, str]
    token_ids: dict[str, str]
    systems: dict[str, tuple]  # name: (connection, its violations)
    start_seq: int


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("door")
    settings = load(
        {
            "JETDBT_HOME": str(root / "home"),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
            "EXTERNAL_PUBLISHES_PER_MINUTE": str(RATE),
            "JETDBT_WAREHOUSES": str(root / "warehouses.yaml"),
        }
    )
    _grant_alpha_wh(settings, ["alpha", "beta"])
    stack = await Stack(settings).start()
    tokens, ids = {}, {}
    for who, team, role, pattern in [
        ("ann", "alpha", "deployer", "alpha_*"),
        ("alice", "alpha", "runner", "alpha_*"),
        ("bill", "beta", "deployer", "beta_*"),
        ("bea", "beta", "runner", "beta_*"),
        ("vic", "beta", "viewer", "beta_*"),
        ("ops", "default", "viewer", "*"),
    ]:
        token, bearer = await principals.create_token(
            stack.bus, principal=who, team=team, role=role, project=pattern
        )
        tokens[who], ids[who] = bearer, token.id
    for who, name in [("ann", ALPHA), ("bill", BETA)]:
        await deploy_and_wait(stack.bus, tiny_project(root / name, name), name, requested_by=who)
    folder = _on_alpha_wh(root / ON_ALPHA_WH, ON_ALPHA_WH)
    await deploy_and_wait(stack.bus, folder, ON_ALPHA_WH, requested_by="bill")
    await stack.stop()
    _grant_alpha_wh(settings, ["alpha"])  # the operator takes beta's grant back
    stack = await Stack(settings).start()
    stack.write_stack_file()
    door = Door(
        stack=stack,
        home=settings.home,
        root=root,
        tokens=tokens,
        token_ids=ids,
        systems={},
        start_seq=(await stack.bus.js.stream_info(EVENTS)).state.last_seq,
    )
    for name, team, project, role in [
        ("sys_a", "alpha", "*", "runner"),
        ("sys_b", "beta", "*", "runner"),
        ("dep_a", "alpha", ALPHA, "deployer"),
        ("flood", "beta", "*", "runner"),
    ]:
        code, out, err = await cli(
            door, "access", "add-system", name, "--team", team, "--project", project,
            "--role", role,
        )  # fmt: skip
        assert code == 0, err
        password = out.split("password (shown once): ")[1].split()[0]
        door.systems[name] = await system(door, name, password)
    yield door
    for nc, _ in door.systems.values():
        await nc.close()
    await stack.stop()


def _grant_alpha_wh(settings, teams: list[str]) -> None:
    """The stack's warehouses: `main` for every team, `alpha_wh` for `teams`."""
    folder = settings.warehouses_file.parent / "warehouses"
    # Not main.duckdb: DuckDB names the database after the file (shared/process/config.py).
    main = {"type": "duckdb", "path": str(folder / "shared.duckdb")}
    alpha_wh = {"type": "duckdb", "path": str(folder / "alpha.duckdb"), "teams": teams}
    settings.warehouses_file.write_text(
        yaml.safe_dump({"warehouses": {"main": main, "alpha_wh": alpha_wh}})
    )


def _on_alpha_wh(folder: Path, name: str) -> Path:
    tiny_project(folder, name)
    (folder / "jetdbt.yaml").write_text("profile:\n  warehouse: alpha_wh\n")
    return folder


def _run_body(run_id: str, **extra) -> bytes:
    return json.dumps(
        {"command": {"label": "build", "select": ["fine"]}, "run_id": run_id, **extra}
    ).encode()


async def _last_seq(site: Door, subject: str) -> int | None:
    try:
        return (await site.stack.bus.js.get_last_msg(EVENTS, subject)).seq
    except NotFoundError:
        return None


async def _violated(violations: list[str], subject: str) -> bool:
    async def seen():
        return any("permissions violation" in v.lower() and subject in v for v in violations)

    try:
        return bool(await wait_for(seen, timeout=10))
    except TimeoutError:
        return False


async def _relation_event(site: Door, kind: type, match) -> ev.Event:
    """The first `kind` event on a relation subject after the site started that matches."""
    js = site.stack.bus.js

    async def found():
        last = (await js.stream_info(EVENTS)).state.last_seq
        for seq in range(site.start_seq + 1, last + 1):
            msg = await js.get_msg(EVENTS, seq)
            if msg.subject.startswith("dbt.evt.relation."):
                event = ev.decode(msg.data)
                if isinstance(event, kind) and match(event):
                    return event
        return None

    return await wait_for(found, timeout=30, interval=0.3)


async def test_a_reply_subject_never_lands_in_the_log(site):
    """Finding 1: a publish's reply subject set to alpha's fact subjects stored the server's
    ack there (alpha's project unowned, alice's retry state and its deployed version gone).
    Replies now travel back through each account's service imports: nothing is stored, and
    alpha's project, alice's retry and alpha's builds are as they were."""
    url = f"/v1/projects/{ALPHA}/runs"
    status, body = await call(site, "POST", url, "alice", json={"command": {"label": "build"}})
    assert status == 202, body
    failed = await finished(site, body["run_id"])
    assert failed["status"] == "failed"
    targets = [
        subjects.deploy_event(ALPHA, "requested"),
        subjects.deploy_event(ALPHA, "deployed"),
        subjects.retry_event(ALPHA, "alice", "saved"),
        subjects.run_event(ALPHA, "forged", "finished"),
    ]
    before = {t: await _last_seq(site, t) for t in targets}
    start = (await site.stack.bus.js.stream_info(EVENTS)).state.last_seq

    sys_b, _ = site.systems["sys_b"]
    for target in targets:
        await sys_b.publish(subjects.command("run", BETA, "sys_b"), b"{}", reply=target)
        await sys_b.publish(
            subjects.intake_write("sys_b", "dbt://main/raw/x"),
            relation_written("dbt://main/raw/x", "sys_b"),
            reply=target,
        )
    await sys_b.flush()
    logins = nats_logins(site.home)
    for user in ("api", "projector"):
        nc, violations = await system(site, user, logins[user])
        try:
            js = nc.jetstream()
            info = await js.add_consumer(EVENTS, deliver_policy="all", ack_policy="none")
            for target in targets:
                await nc.publish(f"$JS.API.STREAM.INFO.{EVENTS}", b"", reply=target)
                # A pull request answered on a fact subject: the log's own first events again.
                await nc.publish(
                    f"$JS.API.CONSUMER.MSG.NEXT.{EVENTS}.{info.name}", b'{"batch": 3}', reply=target
                )
                if user == "api":
                    await nc.publish(
                        subjects.command("run", ALPHA, "alice", via_api=True), b"{}", reply=target
                    )
            await nc.flush()
        finally:
            await nc.close()
    await asyncio.sleep(2)

    assert {t: await _last_seq(site, t) for t in targets} == before
    assert await not_runners_events(site.stack.bus.js, start) == []
    status, deploys = await call(site, "GET", f"/v1/projects/{ALPHA}/deploys", "ann")
    assert status == 200 and deploys["deploys"][0]["team"] == "alpha"
    assert (await call(site, "GET", url, "bea"))[0] == 403
    retry = {"command": {"label": "retry", "dbt_retry_job": failed["run_id"]}}
    status, body = await call(site, "POST", url, "alice", json=retry)
    resumed = await finished(site, body["run_id"])
    assert resumed["status"] != "refused", resumed["refused_reason"]
    assert [n["unique_id"] for n in resumed["nodes"]] == [f"model.{ALPHA}.broken"]
    build = {"command": {"label": "build", "select": ["fine"]}}
    status, body = await call(site, "POST", url, "alice", json=build)
    assert (await finished(site, body["run_id"]))["status"] == "passed"


async def test_a_token_header_counts_only_on_the_apis_own_subject_and_is_checked_again(site):
    """Finding 2: beta's system named its viewer's token on a command for alpha's project;
    the team check was skipped and the door said `api token`. A header is ignored on every
    subject but the API's own, which only the API may publish, and there the runner checks
    the token's principal, expiry, role, pattern and team itself."""
    sys_b, violations = site.systems["sys_b"]
    js = sys_b.jetstream()
    headers = {principals.TOKEN_HEADER: site.token_ids["vic"]}
    ack = await js.publish(
        subjects.command("run", ALPHA, "sys_b"), _run_body("hdr-1"), headers=headers
    )
    refused = await wait_for(
        lambda: site.stack.bus.last_event(subjects.run_event(ALPHA, f"c{ack.seq}", "refused"))
    )
    assert "belongs to team 'alpha'" in refused.reason, refused.reason
    api_subject = subjects.command("run", ALPHA, "sys_b", via_api=True)
    await sys_b.publish(api_subject, _run_body("hdr-2"), headers=headers)
    await sys_b.flush()
    assert await _violated(violations, api_subject)

    operator = site.stack.bus.js  # may publish anything, the API's subject included
    _, expired = await principals.create_token(
        site.stack.bus, principal="alice", team="alpha", role="runner", project="alpha_*",
        expires_in=timedelta(seconds=-1),
    )  # fmt: skip
    cases = [
        ("vic", site.token_ids["vic"], "needs role 'runner'"),
        ("bea", site.token_ids["bea"], "covers projects matching 'beta_*'"),
        ("alice", expired.split("_")[1], "expired"),
        ("alice", site.token_ids["bea"], "speaks for 'bea'"),
        ("alice", "", "unknown or revoked"),
    ]
    for who, token_id, reason in cases:
        ack = await operator.publish(
            subjects.command("run", ALPHA, who, via_api=True),
            _run_body(f"hdr-{uuid.uuid4().hex[:6]}"),
            headers={principals.TOKEN_HEADER: token_id} if token_id else None,
        )
        refused = await wait_for(
            lambda s=ack.seq: site.stack.bus.last_event(
                subjects.run_event(ALPHA, f"c{s}", "refused")
            )
        )
        assert reason in refused.reason, (who, refused.reason)


async def test_a_grant_bounds_the_verbs_and_a_deploy_uses_only_its_own_upload(site):
    """Finding 3: a system granted `runner` published a deploy naming an older bundle and
    rolled the project back. A runner's grant publishes run and cancel only; a deploying
    system names only the bundle its own upload recorded, and none can upload."""
    sys_a, violations = site.systems["sys_a"]
    deploy_subject = subjects.command("deploy", ALPHA, "sys_a")
    await sys_a.publish(deploy_subject, b"{}")
    await sys_a.flush()
    assert await _violated(violations, deploy_subject)

    first = await site.stack.bus.last_event(subjects.deploy_event(ALPHA, "deployed"))
    folder = site.root / ALPHA
    (folder / "models" / "second.sql").write_text("select 2 as id\n")
    _, second = await client.deploy(site.stack.bus, folder, ALPHA, requested_by="ann")
    assert isinstance(second, ev.Deployed) and second.version != first.version

    dep_a, _ = site.systems["dep_a"]
    body = {"bundle_digest": first.version, "bundle_size": 1, "deploy_id": "rollback-1"}
    ack = await dep_a.jetstream().publish(
        subjects.command("deploy", ALPHA, "dep_a"), json.dumps(body).encode()
    )

    async def refused():
        found = await site.stack.bus.last_event(subjects.deploy_event(ALPHA, "refused"))
        return found if found is not None and found.deploy_id == f"c{ack.seq}" else None

    assert "uploaded none" in (await wait_for(refused)).reason
    latest = await site.stack.bus.last_event(subjects.deploy_event(ALPHA, "deployed"))
    assert latest.version == second.version


async def test_a_project_has_a_team_from_its_first_deploy(site):
    """Finding 4: a project the operator deployed (no principal) had team "" and the next
    deployer took it; its runs said `default`. The operator's principal is in team default
    everywhere, so the project is default's: another team cannot take it, and a viewer of
    team default sees it."""
    folder = tiny_project(site.root / "orphan", "orphan")
    await deploy_and_wait(site.stack.bus, folder, "orphan", requested_by="root")
    requested = await site.stack.bus.last_event(subjects.deploy_event("orphan", "requested"))
    assert requested.team == "default"
    _, taken = await client.deploy(
        site.stack.bus, folder, "orphan", requested_by="bill", timeout=120
    )
    assert isinstance(taken, ev.DeployRefused), taken
    assert "belongs to team 'default'" in taken.reason
    status, body = await call(site, "GET", "/v1/projects", "ops")
    assert status == 200 and "orphan" in [p["project"] for p in body["projects"]]


async def test_a_declared_write_is_bound_to_its_publisher_and_agrees_with_its_subject(site):
    """Finding 5: beta's system declared a write on alpha's relation naming producer
    alpha_shop, a subject naming one relation carried another, and a run.finished payload
    on a relation subject entered alpha's audit export. A write reaches the intake under
    its publisher; a runner records only what agrees, naming the publisher, and refuses
    the rest with the reason; nothing of it is in the log as it was sent."""
    sys_b, violations = site.systems["sys_b"]
    js = sys_b.jetstream()
    finished = (GOLDEN / "run.finished.v1.json").read_bytes()
    finished = finished.replace(b'"project": "jaffle_shop"', f'"project": "{ALPHA}"'.encode())
    sent = [
        (
            "dbt://main/main/fine",
            relation_written("dbt://main/main/fine", ALPHA),
            "producer 'alpha_shop'",
        ),
        (
            "dbt://main/main/fine",
            relation_written("dbt://main/main/other", "sys_b"),
            "the subject names",
        ),
        (ALPHA, finished, "not a declared write"),
    ]
    for relation, data, _ in sent:
        await js.publish(subjects.intake_write("sys_b", relation), data)
    good = f"dbt://main/raw/b_{uuid.uuid4().hex[:6]}"
    naive = "2025-06-02T09:12:00"  # a time without its offset: recorded as UTC
    await js.publish(
        subjects.intake_write("sys_b", good), relation_written(good, "sys_b", at=naive)
    )
    for relation, _, reason in sent:
        refused = await _relation_event(
            site, ev.RelationRefused, lambda e, r=reason: e.publisher == "sys_b" and r in e.reason
        )
        assert refused.relation == relation, refused
    recorded = await _relation_event(site, ev.RelationMaterialized, lambda e: e.relation == good)
    assert (recorded.publisher, recorded.producer) == ("sys_b", "sys_b")
    assert recorded.at == datetime.fromisoformat(naive).replace(tzinfo=UTC), recorded.at
    for forged in (
        subjects.intake_write("sys_a", good),
        subjects.relation_event(good, "materialized"),
    ):
        await sys_b.publish(forged, relation_written(good, "sys_a"))
        await sys_b.flush()
        assert await _violated(violations, forged)

    out = site.root / "alpha.parquet"
    await export(site.stack.bus, out, project=ALPHA)
    rows = pq.read_table(out).to_pylist()
    assert rows and not [r for r in rows if not r["subject"].startswith(("dbt.evt.run.",
        "dbt.evt.node.", "dbt.evt.deploy.", "dbt.evt.graph.", "dbt.evt.retry.",
        "dbt.evt.state."))]  # fmt: skip
    assert await not_runners_events(site.stack.bus.js, site.start_seq) == []


async def test_external_publishes_are_bounded_in_size_and_rate(site):
    """Finding 6: any system could store declared writes up to 1 MB in the never-purged
    log. A write over MAX_DECLARED_WRITE_BYTES is refused naming the limit, the intake
    refuses past 64 KiB, and past EXTERNAL_PUBLISHES_PER_MINUTE a principal's writes are
    refused once and then dropped; /metrics counts them per principal."""
    sys_b, _ = site.systems["sys_b"]
    js = sys_b.jetstream()
    await js.publish(subjects.command("run", BETA, "sys_b"), b"{}")  # counted in /metrics
    big = f"dbt://main/raw/big_{uuid.uuid4().hex[:6]}"
    await js.publish(
        subjects.intake_write("sys_b", big), relation_written(big, "sys_b", pad="x" * 20_000)
    )
    refused = await _relation_event(site, ev.RelationRefused, lambda e: e.relation == big)
    assert f"at most {MAX_DECLARED_WRITE_BYTES}" in refused.reason
    before = (await site.stack.bus.js.stream_info(INTAKE)).state.bytes
    with pytest.raises(nats.js.errors.BadRequestError):
        await js.publish(subjects.intake_write("sys_b", big), b"x" * 100_000)
    assert (await site.stack.bus.js.stream_info(INTAKE)).state.bytes == before

    flood, _ = site.systems["flood"]
    fjs = flood.jetstream()
    tag = uuid.uuid4().hex[:6]
    for i in range(RATE + 10):
        relation = f"dbt://main/raw/f{tag}_{i}"
        await fjs.publish(
            subjects.intake_write("flood", relation), relation_written(relation, "flood")
        )
    over = await _relation_event(
        site, ev.RelationRefused, lambda e: e.publisher == "flood" and "a minute" in e.reason
    )
    assert "EXTERNAL_PUBLISHES_PER_MINUTE" in over.reason and str(RATE) in over.reason
    await asyncio.sleep(1)
    js_ops = site.stack.bus.js
    last = (await js_ops.stream_info(EVENTS)).state.last_seq
    recorded, refusals = 0, 0
    for seq in range(site.start_seq + 1, last + 1):
        msg = await js_ops.get_msg(EVENTS, seq)
        if msg.subject.startswith("dbt.evt.relation."):
            event = ev.decode(msg.data)
            recorded += isinstance(event, ev.RelationMaterialized) and event.publisher == "flood"
            refusals += isinstance(event, ev.RelationRefused) and event.publisher == "flood"
    assert (recorded, refusals) == (RATE, 1)
    async with aiohttp.ClientSession() as session:
        auth = {"Authorization": f"Bearer {site.tokens['ops']}"}
        async with session.get(site.stack.api_url + "/metrics", headers=auth) as resp:
            metrics = await resp.text()
    assert f'jetdbt_principal_declared_writes{{principal="flood"}} {RATE + 10}' in metrics
    assert 'jetdbt_principal_commands{principal="sys_b"}' in metrics


async def test_service_users_read_no_tokens_and_create_no_durable_consumers(site):
    """Finding 8: service users read token records they do not need, and could create
    durable consumers on the log that nothing cleans. The projector reads nothing of the
    identity bucket; no service creates a durable (only unnamed, ephemeral consumers)."""
    logins = nats_logins(site.home)
    key = f"token.{site.token_ids['alice']}"
    for user in ("projector", "api"):
        nc, violations = await system(site, user, logins[user])
        try:
            js = nc.jetstream(timeout=2)
            kv = await js.key_value(IDENTITY)
            if user == "projector":
                with pytest.raises(nats.errors.TimeoutError):
                    await kv.get(key)
            else:  # the API authenticates tokens
                assert (await kv.get(key)).value
            for durable in ({"durable_name": "evil"}, {"name": "evil", "durable_name": "evil"}):
                with pytest.raises((nats.errors.TimeoutError, nats.js.errors.BadRequestError)):
                    await js.add_consumer(EVENTS, **durable)
            reply = await nc.request(
                f"$JS.API.CONSUMER.CREATE.{EVENTS}",
                json.dumps({"stream_name": EVENTS, "config": {"durable_name": "evil"}}).encode(),
                timeout=5,
            )
            assert "ephemeral" in reply.data.decode(), reply.data
        finally:
            await nc.close()
    names = [c.name for c in await site.stack.bus.js.consumers_info(EVENTS)]
    assert "evil" not in names


async def _refused_run(site: Door, project: str, run_id: str) -> ev.RunRefused:
    async def refused():
        found = await site.stack.bus.last_event(subjects.run_event(project, run_id, "refused"))
        return found if isinstance(found, ev.RunRefused) else None

    return await wait_for(refused, timeout=60)


async def test_the_api_refuses_a_run_on_a_warehouse_not_granted_to_the_projects_team(site):
    """Issue 38: any team could build with any configured warehouse. A run of beta's project
    on alpha_wh is a 403 at the API, published nowhere; alpha's still builds on it."""
    status, body = await call(
        site, "POST", f"/v1/projects/{ON_ALPHA_WH}/runs", "bea", data=_run_body("wh-api-b")
    )
    assert status == 403 and NOT_GRANTED in body["error"], body
    status, body = await call(site, "POST", f"/v1/projects/{ON_ALPHA_WH}/jobs/any/runs", "bea")
    assert status == 403 and NOT_GRANTED in body["error"], body
    said = await site.stack.bus.last_event(subjects.run_event(ON_ALPHA_WH, "wh-api-b", "requested"))
    assert said is None
    folder = _on_alpha_wh(site.root / "alpha_wh_shop", "alpha_wh_shop")
    await deploy_and_wait(site.stack.bus, folder, "alpha_wh_shop", requested_by="ann")
    status, body = await call(
        site, "POST", "/v1/projects/alpha_wh_shop/runs", "alice", data=_run_body("wh-api-a")
    )
    assert status == 202, body
    assert (await finished(site, "wh-api-a"))["status"] == "passed"


async def test_the_runner_refuses_the_cli_a_run_and_a_deploy_on_a_warehouse_not_granted(site):
    """The CLI publishes on NATS, past the API: the runner checks the same grant."""
    code, _, err = await cli(site, "run", ON_ALPHA_WH, "--run-id", "wh-cli-b", principal="bea")
    assert code == 3 and NOT_GRANTED in err, err
    assert NOT_GRANTED in (await _refused_run(site, ON_ALPHA_WH, "wh-cli-b")).reason
    folder = _on_alpha_wh(site.root / "beta_two", "beta_two")
    code, _, err = await cli(site, "deploy", str(folder), principal="bill")
    assert code == 3 and NOT_GRANTED in err, err
    assert await site.stack.bus.last_event(subjects.deploy_event("beta_two", "deployed")) is None


async def test_the_runner_refuses_a_systems_run_on_a_warehouse_not_granted(site):
    sys_b, _ = site.systems["sys_b"]
    await sys_b.jetstream().publish(  # stored: a JetStream ack, no permissions violation
        subjects.command("run", ON_ALPHA_WH, "sys_b"), _run_body("wh-nats-b")
    )
    refused = await _refused_run(site, ON_ALPHA_WH, "wh-nats-b")
    assert NOT_GRANTED in refused.reason
    started = await site.stack.bus.last_event(
        subjects.run_event(ON_ALPHA_WH, "wh-nats-b", "started")
    )
    assert started is None


async def test_healthz_asks_nats_while_its_server_is_stopped(site, monkeypatch):
    """Finding 7: /healthz said 200 {"nats": true} for 40 s while nats-server was stopped
    with SIGSTOP. It asks JetStream within a deadline (last here: it stops the server)."""
    import os
    import signal

    from jetdbt.services.api import health_routes

    monkeypatch.setattr(health_routes, "NATS_DEADLINE_SECONDS", 0.5)
    status, body = await call(site, "GET", "/healthz")
    assert status == 200 and body["nats"] is True
    pid = site.stack._nats._proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        status, body = await call(site, "GET", "/healthz")
        assert body["nats"] is False
    finally:
        os.kill(pid, signal.SIGCONT)

    async def healthy():
        status, body = await call(site, "GET", "/healthz")
        return status == 200 and body["nats"]

    await wait_for(healthy, timeout=30)

"""The rules of identity without dbt: command subjects and their principal, token strings,
a payload's claim, the permissions a system's NATS user gets, the contract a service
checks, and the runner's refusal of a command that claims another principal."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import uuid

import pytest
from jetdbt.services.access.nats_users import (
    SERVICE_USERS,
    AccessError,
    add_system,
    ensure_users,
    permissions,
    render_deploy_accounts,
    render_deploy_system,
)
from jetdbt.services.cli.access_commands import parse_duration
from jetdbt.services.cli.common import CliError
from jetdbt.services.stack.composition import Stack
from jetdbt.services.stack.embedded import NatsServer, nats_binary
from jetdbt.shared.bus import contract, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.identity import principals
from jetdbt.shared.process.config import load
from jetdbt.shared.project import uploads

from tests.support.helpers import get_json, wait_for
from tests.support.paths import DEPLOY

DEPLOY_NATS = DEPLOY / "nats"
DIGEST = "sha256:" + "0" * 64


def _first(seen: list[ev.Event], kind: type):
    """A predicate for wait_for: the first event of `kind` seen so far."""
    return lambda: asyncio.sleep(0, next((e for e in seen if isinstance(e, kind)), None))


def test_a_command_subject_names_its_principal_and_only_one():
    subject = subjects.command("run", "shop", "Ann Lee")
    assert subject.startswith("dbt.cmd.run.shop._")
    assert subjects.command_principal(subject) == "Ann Lee"
    assert subjects.command_principal("dbt.cmd.run.shop") == subjects.ANONYMOUS
    for bad in ("dbt.cmd.run.shop.alice.extra", "dbt.cmd.run.shop._!!", "dbt.cmd.run.shop._"):
        with pytest.raises(subjects.InvalidName):
            subjects.command_principal(bad)
    # One spelling per principal: "alice" written as base32 is not alice's subject.
    with pytest.raises(subjects.InvalidName):
        subjects.command_principal("dbt.cmd.run.shop._mfwgsy3f")


def test_a_payload_may_repeat_its_principal_never_name_another():
    assert principals.claim_problem("", "alice") is None
    assert principals.claim_problem("alice", "alice") is None
    problem = principals.claim_problem("alice", "mallory")
    assert "'requested_by'" in problem and "'mallory'" in problem


def test_roles_are_ordered_and_patterns_are_globs():
    assert principals.role_allows("deployer", "runner") and not principals.role_allows(
        "viewer", "runner"
    )
    assert principals.project_matches("analytics_*", "analytics_shop")
    assert not principals.project_matches("analytics_*", "billing_shop")


def test_a_system_user_may_publish_only_its_own_commands_and_declared_writes(tmp_path):
    ensure_users(tmp_path)
    add_system(tmp_path, "ingest", ["shop", "depot"])
    users = json.loads((tmp_path / "access" / "nats-users.json").read_text())
    granted = permissions("ingest", users["users"]["ingest"])
    # A runner's grant: run, cancel and its jobs, never deploy.
    assert granted["publish"]["allow"] == [
        "dbt.cmd.run.depot.ingest",
        "dbt.cmd.run.shop.ingest",
        "dbt.cmd.cancel.depot.ingest",
        "dbt.cmd.cancel.shop.ingest",
        "dbt.cmd.job.depot.ingest",
        "dbt.cmd.job.shop.ingest",
        "dbt.in.ingest.relation.*.materialized",
    ]
    assert granted["subscribe"]["allow"] == ["_INBOX_ingest.>"]
    for bad in (("runner", ["shop"]), ("Bad Name", ["shop"]), ("ok", ["a.b"]), ("ok", [])):
        with pytest.raises(AccessError):
            add_system(tmp_path, *bad)
    projector = permissions("projector", users["users"]["projector"])
    assert not any(s.startswith("dbt.") for s in projector["publish"]["allow"])
    assert "$JS.API.STREAM.UPDATE.>" in projector["publish"]["deny"]
    assert "$JS.API.CONSUMER.DELETE.DBT_COMMANDS.runners" in projector["publish"]["deny"]
    assert (tmp_path / "access" / "nats-auth.conf").stat().st_mode & 0o777 == 0o600
    # The triggers service publishes its runs' commands and nothing else of jetdbt's, and
    # alone reads its durable consumer.
    triggers = permissions("triggers", users["users"]["triggers"])
    assert [s for s in triggers["publish"]["allow"] if not s.startswith("$")] == [
        "dbt.cmd.run.*.triggers"
    ]
    assert "$JS.API.CONSUMER.MSG.NEXT.DBT_EVENTS.triggers" in triggers["publish"]["allow"]
    assert "$JS.API.CONSUMER.MSG.NEXT.DBT_COMMANDS.runners" in triggers["publish"]["deny"]
    runner = permissions("runner", users["users"]["runner"])
    assert "$JS.API.CONSUMER.MSG.NEXT.DBT_EVENTS.triggers" in runner["publish"]["deny"]
    with pytest.raises(AccessError):
        add_system(tmp_path, "triggers", ["shop"])


def test_expiry_durations():
    assert parse_duration("30d").days == 30 and parse_duration("90m").seconds == 5400
    for bad in ("30", "0d", "-1d", "1y", ""):
        with pytest.raises(CliError):
            parse_duration(bad)


async def test_a_service_refuses_a_drifted_contract_naming_the_field(nats_url):
    bus = await connect(nats_url, "operator")  # applies streams.yaml
    try:
        await contract.check(bus.js, contract.load())
        config = (await bus.js.stream_info(EVENTS)).config
        await bus.js.update_stream(dataclasses.replace(config, max_age=86400.0))
        with pytest.raises(contract.IncompatibleContract, match="field 'max_age'"):
            await connect(nats_url, "service", apply=False)
        await bus.js.delete_consumer("DBT_COMMANDS", "runners")
        await bus.js.update_stream(config)
        with pytest.raises(contract.IncompatibleContract, match="consumer runners does not exist"):
            await contract.check(bus.js, contract.load())
    finally:
        await bus.close()


async def test_tokens_authenticate_by_hash_and_never_by_a_guess(nats_url):
    bus = await connect(nats_url, "operator")
    try:
        token, bearer = await principals.create_token(
            bus, principal="alice", team="analytics", role="runner"
        )
        assert bearer.startswith(f"jdbt_{token.id}_") and bearer.split("_", 2)[2] not in str(token)
        assert (await principals.authenticate(bus, bearer)).principal == "alice"
        for guess in ("jdbt_", "Bearer x", f"jdbt_{token.id}_", f"jdbt_{token.id}_x" * 3):
            with pytest.raises(principals.BadToken):
                await principals.authenticate(bus, guess)
        with pytest.raises(principals.IdentityError, match="cannot move a principal"):
            await principals.create_token(bus, principal="alice", team="billing", role="viewer")
        assert await principals.team_of(bus, "alice") == "analytics"
        assert await principals.team_of(bus, "nobody") == principals.DEFAULT_TEAM
    finally:
        await bus.close()


async def test_a_command_claiming_another_principal_is_refused_naming_the_field(stack):
    seen: list[ev.Event] = []

    async def on(msg):
        seen.append(ev.decode(msg.data))

    sub = await stack.bus.nc.subscribe("dbt.evt.run.>", cb=on)
    try:
        body = b'{"command": {"label": "build"}, "run_id": "alices-1", "requested_by": "alice"}'
        ack = await stack.bus.js.publish(subjects.command("run", "shop", "mallory"), body)
        refused = await wait_for(_first(seen, ev.RunRefused))
    finally:
        await sub.unsubscribe()
    # Filed under the command's own id: a refused body's run id names nobody's run.
    assert refused.run_id == f"c{ack.seq}" and "'requested_by'" in refused.reason
    assert not any(isinstance(e, ev.RunRequested) for e in seen)


def test_the_deployment_nats_users_are_the_generated_rules():
    """deploy/nats/accounts.conf is rendered from the rules the embedded stack runs with, and
    nats-server accepts the deployment's configuration, with a system's account beside."""
    deploy = DEPLOY_NATS
    assert (deploy / "accounts.conf").read_text() == render_deploy_accounts(), (
        "regenerate: python -m jetdbt.services.access.nats_users > deploy/nats/accounts.conf"
    )
    env = {"NATS_SERVER_NAME": "n1"}
    env |= {f"{u.upper()}_PASSWORD": f"pw{u}" for u in (*SERVICE_USERS, "admin")}
    checked = subprocess.run(
        [nats_binary(), "-c", str(deploy / "nats-server.conf"), "-t"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert checked.returncode == 0, checked.stderr


async def test_a_deployment_runs_on_its_users_once_the_operator_applied_the_contract(
    tmp_path, monkeypatch, pg_url
):
    """deploy/nats/accounts.conf in a real nats-server: services reached as `user:password@`
    in NATS_URL only check the contract (refusing to start before `admin` applied it),
    read replies under their own inbox prefix, the API answers with a token and may store a
    deploy's bundle and upload record."""
    passwords = {u: f"pw-{u}-{uuid.uuid4().hex}" for u in (*SERVICE_USERS, "admin")}
    for user, password in passwords.items():
        monkeypatch.setenv(f"{user.upper()}_PASSWORD", password)
    conf = tmp_path / "nats.conf"
    shutil.copy(DEPLOY_NATS / "accounts.conf", tmp_path / "accounts.conf")
    (tmp_path / "systems.conf").write_text(render_deploy_system("sched", ["shop"]))
    monkeypatch.setenv("SCHED_PASSWORD", "pw-sched")
    conf.write_text('accounts {\n include "accounts.conf"\n}\n')
    server = NatsServer(tmp_path / "nats", config=conf).start()
    try:
        url = server.url.replace("://", "://{user}:{password}@")

        def settings(user: str):
            return load(
                {
                    "JETDBT_HOME": str(tmp_path / user),
                    "NATS_URL": url.format(user=user, password=passwords[user]),
                    "DATABASE_URL": pg_url,
                    "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
                    "JETDBT_API_PORT": "0",
                }
            )

        api_only = Stack(settings("api"), runner=False, projectors=False)
        with pytest.raises(contract.IncompatibleContract, match="jetdbt contract apply"):
            await api_only.start()
        admin = await connect(url.format(user="admin", password=passwords["admin"]), "operator")
        try:
            _, bearer = await principals.create_token(
                admin, principal="ops", team="platform", role="viewer"
            )
        finally:
            await admin.close()
        projectors = await Stack(settings("projector"), runner=False, api=False).start()
        api = await Stack(settings("api"), runner=False, projectors=False).start()
        try:
            assert api.admin_token is None  # a service never bootstraps tokens
            assert api.bus.nc._inbox_prefix == bytearray(b"_INBOX_api")
            status, body = await get_json(f"{api.api_url}/v1/projections", token=bearer)
            assert status == 200, body
            status, _ = await get_json(f"{api.api_url}/v1/projections", token="jdbt_x")
            assert status == 401
            # A deploy a token uploads: the API stores its bundle and its upload record.
            digest = await api.bus.put_blob(b"uploaded through the API")
            await uploads.record(api.bus, "up1", digest)
            assert await uploads.recorded(api.bus, "up1") == digest
        finally:
            await api.stop()
            await projectors.stop()
    finally:
        server.stop()
    log = (tmp_path / "nats" / "nats-server.log").read_text()
    assert "Violation" not in log, [line for line in log.splitlines() if "Violation" in line]


async def test_another_teams_principal_cannot_take_a_project_over_by_deploying_it(stack):
    seen: list[ev.Event] = []

    async def on(msg):
        seen.append(ev.decode(msg.data))

    await principals.create_token(stack.bus, principal="bob", team="billing", role="deployer")
    await stack.bus.publish(
        ev.DeployRequested(
            project="shop", deploy_id="d1", bundle_digest=DIGEST, bundle_size=1, team="analytics"
        )
    )
    sub = await stack.bus.nc.subscribe("dbt.evt.deploy.shop.>", cb=on)
    try:
        body = json.dumps({"bundle_digest": DIGEST, "bundle_size": 1, "deploy_id": "d2"})
        await stack.bus.js.publish(subjects.command("deploy", "shop", "bob"), body.encode())
        refused = await wait_for(
            lambda: asyncio.sleep(
                0, next((e for e in seen if isinstance(e, ev.DeployRefused)), None)
            )
        )
    finally:
        await sub.unsubscribe()
    assert "belongs to team 'analytics'" in refused.reason and "'billing'" in refused.reason
    assert not any(isinstance(e, ev.DeployRequested) for e in seen)
    unknown = principals.Caller(principal="root", team="default", door="nats operator")
    assert principals.deploy_team(unknown, "shop", "analytics") == ("analytics", None)

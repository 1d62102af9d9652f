"""A token reads only its team's runs, also before the projection has folded a run: the
routes that learn a run's project from the event log scope it by that project."""

from __future__ import annotations

import msgspec
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.identity import principals

from tests.support.helpers import get_json


async def test_log_of_a_run_the_projection_has_not_folded_is_scoped_by_its_project(stack):
    run_id = "unfolded1"
    # A run of another team's project the log knows and the projection does not (yet):
    # a cancel recorded before the run was delivered, and the lines its runner wrote.
    await stack.bus.publish(
        ev.RunCancelRequested(
            project="analytics_secret", run_id=run_id, requested_by="ann", command_seq=1
        )
    )
    for text in ("connecting with password hunter2", "done"):
        await stack.bus.js.publish(subjects.run_log(run_id), text.encode())
    _, bearer = await principals.create_token(
        stack.bus, principal="bob", team="billing", role="viewer", project="*"
    )
    url = f"{stack.api_url}/v1/runs/{run_id}/logs"
    status, body = await get_json(url, bearer)
    assert status == 403, body
    assert "analytics_secret" in body["error"] and "billing" in body["error"]
    assert "hunter2" not in str(body)
    status, body = await get_json(f"{url}?follow=true", bearer)
    assert status == 403, body
    # The stack's admin token still reads it.
    status, body = await get_json(url)
    assert status == 200 and [x["text"] for x in body["lines"]][-1] == "done"


async def test_a_run_id_the_log_gives_by_default_cannot_be_taken_ahead_by_another_project(stack):
    """A run asked for without a run id is `c<command sequence>`: another project's command
    naming that id before it would own it, and the run would be refused as a reused id."""
    from jetdbt.shared.bus.commands import BuildCommand, RunCommand
    from jetdbt.shared.bus.streams import COMMANDS
    from nats.js.api import StreamInfo

    info: StreamInfo = await stack.bus.js.stream_info(COMMANDS)
    victim_seq = info.state.last_seq + 2
    # A raw body: the command's own type refuses such an id where it is built.
    squat = {"command": {"label": "build"}, "run_id": f"c{victim_seq}", "requested_by": "bob"}
    await stack.bus.js.publish(
        subjects.command("run", "billing_x", "bob"), msgspec.json.encode(squat)
    )
    ack = await stack.bus.publish_command(
        "run", "analytics_y", RunCommand(command=BuildCommand()), "plain", principal="ann"
    )
    assert ack.seq == victim_seq

    async def victims_fate():
        return await stack.bus.last_event(
            subjects.run_event("analytics_y", f"c{victim_seq}", "requested")
        ) or await stack.bus.last_event(
            subjects.run_event("analytics_y", f"c{victim_seq}", "refused")
        )

    from tests.support.helpers import wait_for

    fate = await wait_for(victims_fate)
    assert isinstance(fate, ev.RunRequested), fate
    squatted = await stack.bus.last_event(
        subjects.run_event("billing_x", f"c{info.state.last_seq + 1}", "refused")
    )
    assert isinstance(squatted, ev.RunRefused) and "c<digits>" in squatted.reason


async def test_two_projects_asking_for_one_run_id_at_once_get_one_run(stack):
    """Run ids are unique across projects also when two commands are handled at once (their
    runs would share the run's log subject and kept log object)."""
    from jetdbt.shared.bus.commands import BuildCommand, RunCommand

    run_id = "shared-nightly"
    for project, who in (("billing_x", "bob"), ("analytics_y", "ann")):
        command = RunCommand(command=BuildCommand(), run_id=run_id, requested_by=who)
        await stack.bus.publish_command("run", project, command, f"k-{project}", principal=who)

    async def both_answered():
        found = []
        for project in ("billing_x", "analytics_y"):
            requested = await stack.bus.last_event(subjects.run_event(project, run_id, "requested"))
            found.append(requested)
        refusals = []
        for seq in (1, 2, 3, 4, 5, 6):
            for project in ("billing_x", "analytics_y"):
                refused = await stack.bus.last_event(
                    subjects.run_event(project, f"c{seq}", "refused")
                )
                if refused is not None:
                    refusals.append(refused)
        return (found, refusals) if sum(x is not None for x in found) + len(refusals) >= 2 else None

    from tests.support.helpers import wait_for

    requested, refusals = await wait_for(both_answered)
    assert sum(x is not None for x in requested) == 1, requested
    assert len(refusals) == 1 and "belongs to another project" in refusals[0].reason


async def test_contract_apply_never_prints_the_password_in_nats_url(stack):
    """NATS_URL may carry the user and password (docs/security.md: "or the user in the URL")."""
    from tests.support.helpers import jetdbt

    password = "s3cret-in-the-url"
    host = stack.nats_url.split("://", 1)[1].rsplit("@", 1)[-1]
    stack.nats_url, configured = f"nats://admin:{password}@{host}", stack.nats_url
    try:
        done = await jetdbt(stack, "contract", "apply", timeout=120)
    finally:
        stack.nats_url = configured
    assert done.returncode == 0, done.stderr
    assert "streams.yaml applied to nats://admin:***@" in done.stdout
    assert password not in done.stdout + done.stderr


async def test_head_needs_the_role_get_needs(stack):
    """aiohttp answers HEAD on every GET route: a viewer token must not learn from its
    status and headers what the admin-only GET would answer."""
    import aiohttp

    _, viewer = await principals.create_token(
        stack.bus, principal="vic", team="billing", role="viewer", project="*"
    )
    headers = {"Authorization": f"Bearer {viewer}"}
    async with aiohttp.ClientSession() as session:
        for path in ("/v1/dead-letters", "/v1/relations/dbt://wh/main/orders"):
            for method in ("GET", "HEAD"):
                async with session.request(method, stack.api_url + path, headers=headers) as r:
                    assert r.status == 403, (method, path, r.status)


async def test_a_run_is_found_by_its_run_events_not_by_a_principal_of_the_same_name(stack):
    """`dbt.evt.retry.<project>.<principal>.saved` has the shape of a run's subject: a
    principal named like a run id must not file that run under the principal's project."""
    from jetdbt.shared.runs import run_logs

    run_id = "nightly"
    await stack.bus.publish(
        ev.RunRequested(project="analytics_y", run_id=run_id, command={"label": "build"})
    )
    await stack.bus.js.publish(subjects.run_log(run_id), b"a line of analytics")
    digest = "sha256:" + "0" * 64
    await stack.bus.publish(
        ev.RetryStateSaved(
            project="billing_x",
            principal=run_id,
            run_id="b1",
            attempt=1,
            run_results_digest=digest,
            version=digest,
            profile_digest=digest,
            command={"label": "build"},
        )
    )
    found = await run_logs.find(stack.bus, run_id)
    assert found is not None and found.project == "analytics_y"
    status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}/logs")
    assert status == 200 and body["project"] == "analytics_y", body


async def test_a_command_is_not_dropped_as_the_duplicate_of_another_principals_message(stack):
    """A publisher chooses its message's Nats-Msg-Id: a system's user sending the id of a
    command another project will send (a scheduler's predictable run id) must not make
    the stream drop that command as a duplicate."""
    from jetdbt.shared.bus.commands import BuildCommand, RunCommand

    run_id = "nightly-2026-11-30"
    await stack.bus.js.publish(
        subjects.command("run", "billing_x", "bob"),
        msgspec.json.encode({"command": {"label": "build"}, "requested_by": "bob"}),
        headers={"Nats-Msg-Id": f"cmd:run:analytics_y:{run_id}"},
    )
    command = RunCommand(command=BuildCommand(), run_id=run_id, requested_by="ann")
    await stack.bus.publish_command("run", "analytics_y", command, run_id, principal="ann")

    from tests.support.helpers import wait_for

    requested = await wait_for(
        lambda: stack.bus.last_event(subjects.run_event("analytics_y", run_id, "requested")),
        timeout=20,
    )
    assert requested.requested_by == "ann"
    # A repeated publish of a command is still the duplicate it is.
    other = msgspec.structs.replace(command, run_id="nightly-2")
    first = await stack.bus.publish_command(
        "run", "analytics_y", other, "nightly-2", principal="ann"
    )
    again = await stack.bus.publish_command(
        "run", "analytics_y", other, "nightly-2", principal="ann"
    )
    assert not first.duplicate and again.duplicate and again.seq == first.seq


async def test_a_declared_write_cannot_take_a_facts_message_id(stack):
    """An external system may publish dbt.evt.relation.*.materialized, with any Nats-Msg-Id:
    one naming a fact's id (a run's end) must not make the stream drop that fact."""
    fact = ev.RunRefused(project="analytics_y", run_id="r9", reason="no deployed version")
    await stack.bus.js.publish(
        subjects.relation_event("dbt://wh/main/orders", "materialized"),
        b"{}",
        headers={"Nats-Msg-Id": fact.event_id()},
    )
    await stack.bus.publish(fact)
    stored = await stack.bus.last_event(subjects.run_event("analytics_y", "r9", "refused"))
    assert isinstance(stored, ev.RunRefused), stored
    # A fact published again is still the duplicate it is.
    first = await stack.bus.publish(ev.RunRefused(project="analytics_y", run_id="r8", reason="x"))
    again = await stack.bus.publish(ev.RunRefused(project="analytics_y", run_id="r8", reason="x"))
    assert again.duplicate and again.seq == first.seq


async def test_jetdbt_logs_prints_control_characters_as_their_codes(stack):
    """A run's log holds what dbt printed for a hostile project (`{{ log(...) }}`, a model's
    name): an escape sequence must not reach the terminal of whoever reads it."""
    from tests.support.helpers import jetdbt

    run_id = "escaped1"
    await stack.bus.publish(
        ev.RunRequested(project="analytics_y", run_id=run_id, command={"label": "build"})
    )
    hostile = "clear\x1b[2J and link \x1b]8;;https://example.invalid\x07here\x1b]52;c;aGk=\x07"
    await stack.bus.js.publish(subjects.run_log(run_id), hostile.encode())
    done = await jetdbt(stack, "logs", run_id, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "clear\\x1b[2J and link" in done.stdout


async def test_a_system_user_cannot_take_a_persons_name(tmp_path, pg_url):
    """`jetdbt access add-system alice` would give a NATS user the right to publish as
    alice (run, retry her failed run, cancel) and move her to the system's team."""
    import asyncio
    import uuid

    from jetdbt.services.access.local import nats_logins
    from jetdbt.services.stack.composition import Stack
    from jetdbt.shared.process.config import load

    from tests.support.helpers import JETDBT

    settings = load(
        {
            "JETDBT_HOME": str(tmp_path / "home"),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
        }
    )
    stack = await Stack(settings).start()
    try:
        stack.write_stack_file()
        await principals.create_token(
            stack.bus, principal="alice", team="analytics", role="runner", project="*"
        )
        env = {"PATH": "/usr/bin:/bin", "JETDBT_HOME": str(settings.home)}
        proc = await asyncio.create_subprocess_exec(
            JETDBT,
            *("access", "add-system", "alice", "--team", "billing", "--project", "*"),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode != 0, out.decode()
        assert "person's principal" in err.decode()
        assert "alice" not in nats_logins(settings.home)
        alice = await principals.load_principal(stack.bus, "alice")
        assert (alice.kind, alice.team) == ("person", "analytics")
    finally:
        await stack.stop()


async def test_a_bearer_with_undecodable_bytes_is_a_401_not_a_500(stack):
    """Token ids are not secret (a run's door names one): a header holding bytes that are
    not UTF-8 after a known id must be refused as malformed."""
    import asyncio

    token, _ = await principals.create_token(stack.bus, principal="zed", team="t", role="viewer")
    host, port = stack.api_url.split("//")[1].rsplit(":", 1)
    for secret in (b"\xff\xfe", b"caf\xc3\xa9"):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"GET /v1/projects HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Authorization: Bearer jdbt_" + token.id.encode() + b"_" + secret + b"\r\n\r\n"
        )
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert answer.split(b"\r\n", 1)[0].endswith(b"401 Unauthorized"), answer[:300]
        assert b"malformed" in answer

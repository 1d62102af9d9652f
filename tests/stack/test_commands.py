"""Malformed commands published straight on NATS are refused with a reason, never dropped."""

from __future__ import annotations

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev

from tests.support.helpers import get_json, wait_for

VALID_RUN = b'{"command": {"label": "build"}}'
DIGEST = b"sha256:" + b"0" * 64


async def refused_run(stack, events, subject: str, body: bytes) -> ev.RunRefused:
    """Publish a raw command; return the RunRefused for it (run id c<command seq>)."""
    ack = await stack.bus.js.publish(subject, body)
    return await events.first(lambda e: isinstance(e, ev.RunRefused) and e.run_id == f"c{ack.seq}")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"command": {"label": "build", "select": [}', "malformed run command: not valid JSON"),
        (b'{"command": {"label": "build", "select": "x"}}', "got `str` - at `$.command.select`"),
        (b'{"command": {"label": "build", "selct": []}}', "unknown field `selct`"),
        (b'{"command": {"label": "compyle"}}', "`$.command.label`"),
        (b'{"command": {"label": "build"}, "run_id": "Bad Id"}', "run id 'Bad Id' is invalid"),
        (
            b'{"command": {"label": "build", "select": ["orders", "state:modified", "--empty"],'
            b' "defer": true}}',
            "select[2] is '--empty': a value cannot start with '-'",
        ),
        (b'{"command": {"label": "build", "exclude": [" -x"]}}', "exclude[0]"),
        (
            b'{"command": {"label": "parse", "bundle_digest": "../jobs/r1.1/project"}}',
            "'../jobs/r1.1/project' is not a content digest",
        ),
        (b'{"command": {"label": "build"}, "requested_by": "%s"}' % (b"a" * 3000), "<= 128"),
        (b'{"command": {"label": "build"}, "run_id": "%s"}' % (b"r" * 3000), "(3000 characters)"),
        (b'{"command": {"label": "build", "vars": {"x": "%s"}}}' % (b"v" * 70000), "at most 65536"),
    ],
    ids=[
        "bad-json",
        "select-not-a-list",
        "unknown-key",
        "unknown-label",
        "bad-run-id",
        "select-flag",
        "exclude-flag",
        "parse-digest-path",
        "long-principal",
        "long-run-id",
        "oversized",
    ],
)
async def test_a_malformed_run_command_is_refused_naming_the_problem(stack, events, body, named):
    refused = await refused_run(stack, events, "dbt.cmd.run.jaffle_shop", body)
    assert refused.project == "jaffle_shop"
    assert named in refused.reason
    assert len(refused.reason) < 400  # quotes a prefix of the input, never all of it


async def test_a_subject_token_too_long_for_a_subject_is_refused_and_the_stack_lives(stack, events):
    """A 3,000-character project token once made the runner publish on a subject over
    4 KB: the server closed its connection for good and every later command died."""
    refused = await refused_run(stack, events, "dbt.cmd.run." + "a" * 3000, VALID_RUN)
    assert "is invalid" in refused.reason and "(3000 characters)" in refused.reason
    assert refused.project.endswith("…") and len(refused.project) < 100
    later = await refused_run(stack, events, "dbt.cmd.run.jaffle_shop", VALID_RUN)
    assert "no deployed version" in later.reason


async def test_a_command_for_an_invalid_project_name_is_refused(stack, events):
    refused = await refused_run(stack, events, "dbt.cmd.run.BadName", VALID_RUN)
    assert refused.project == "BadName"
    assert "project name 'BadName' is invalid" in refused.reason
    assert "lowercase letters, digits" in refused.reason


async def test_a_run_of_a_project_never_deployed_is_refused(stack, events):
    ack = await stack.bus.js.publish(
        "dbt.cmd.run.jaffle_shop", b'{"command": {"label": "build"}, "run_id": "never-1"}'
    )
    refused = await events.first(lambda e: isinstance(e, ev.RunRefused))
    assert refused.run_id == "never-1" and refused.project == "jaffle_shop"
    assert "no deployed version" in refused.reason and "deploy it first" in refused.reason
    # The command itself was recorded before it was refused.
    requested = next(e for e in events.seen if isinstance(e, ev.RunRequested))
    assert requested.run_id == "never-1" and requested.command_seq == ack.seq
    assert not any(isinstance(e, ev.RunStarted) for e in events.seen)


async def test_a_project_token_that_is_not_base32_is_refused(stack, events):
    ack = await stack.bus.js.publish("dbt.cmd.run._!!", VALID_RUN)
    refused = await events.first(
        lambda e: isinstance(e, ev.RunRefused) and e.run_id == f"c{ack.seq}", timeout=5
    )
    assert "invalid" in refused.reason


async def test_an_unknown_verb_is_refused_listing_the_known_ones(stack, events):
    refused = await refused_run(stack, events, "dbt.cmd.frobnicate.jaffle_shop", VALID_RUN)
    assert "unknown command verb 'frobnicate'" in refused.reason
    assert "known: deploy, run, cancel" in refused.reason


@pytest.mark.parametrize(
    ("subject", "body", "named"),
    [
        ("dbt.cmd.deploy.jaffle_shop", b"{]", "not valid JSON"),
        ("dbt.cmd.deploy.jaffle_shop", b'{"bundle_digest": "sha256:00"}', "bundle_size"),
        (
            "dbt.cmd.deploy.BadName",
            b'{"bundle_digest": "%s", "bundle_size": 1}' % DIGEST,
            "BadName",
        ),
        (
            "dbt.cmd.deploy.p",
            b'{"bundle_digest": "../jobs/r1.1", "bundle_size": 1}',
            "not a content digest",
        ),
    ],
    ids=["bad-json", "missing-field", "bad-project", "digest-as-path"],
)
async def test_a_malformed_deploy_command_is_refused(stack, events, subject, body, named):
    ack = await stack.bus.js.publish(subject, body)
    refused = await events.first(
        lambda e: isinstance(e, ev.DeployRefused) and e.deploy_id == f"c{ack.seq}"
    )
    assert named in refused.reason
    assert not any(isinstance(e, ev.DeployRequested) for e in events.seen)


async def test_a_refused_run_is_visible_in_the_api(stack, events):
    refused = await refused_run(
        stack, events, "dbt.cmd.run.jaffle_shop", b'{"command": {"label": "build", "x": 1}}'
    )
    url = f"{stack.api_url}/v1/runs/{refused.run_id}"

    async def projected():
        status, body = await get_json(url)
        return body if status == 200 else None

    body = await wait_for(projected)
    assert body["status"] == "refused"
    assert body["refused_reason"] == refused.reason
    assert body["project"] == "jaffle_shop" and body["nodes"] == []


async def test_an_unknown_run_is_a_404_with_a_json_error(stack):
    status, body = await get_json(f"{stack.api_url}/v1/runs/no-such-run")
    assert status == 404
    assert body == {"error": "run 'no-such-run' not found"}


async def test_a_run_id_another_project_owns_is_refused_without_touching_that_run(stack, events):
    """Reusing a victim's run id once turned its row "refused", rewrote its requested_by
    and deleted its live job folder."""
    await stack.bus.js.publish(
        "dbt.cmd.run.victim.alice",
        b'{"command": {"label": "build"}, "run_id": "shared-1", "requested_by": "alice"}',
    )
    await events.first(lambda e: isinstance(e, ev.RunRefused) and e.run_id == "shared-1")
    url = f"{stack.api_url}/v1/runs/shared-1"

    async def projected():
        status, body = await get_json(url)
        return body if status == 200 and body["status"] == "refused" else None

    before = await wait_for(projected)
    attack = await refused_run(
        stack,
        events,
        "dbt.cmd.run.attacker.mallory",
        b'{"command": {"label": "build"}, "run_id": "shared-1", "requested_by": "mallory"}',
    )
    assert attack.project == "attacker" and attack.run_id != "shared-1"
    assert "run id 'shared-1' belongs to another project" in attack.reason
    await wait_for(lambda: get_json(f"{stack.api_url}/v1/runs/{attack.run_id}"))
    status, after = await get_json(url)
    assert status == 200 and after == before
    assert after["project"] == "victim" and after["requested_by"] == "alice"


@pytest.mark.parametrize(
    ("blob", "named"),
    [
        (None, "is missing from the object store DBT_BLOBS"),
        (b"not a tar archive", "not a valid bundle"),
    ],
    ids=["missing-bundle", "corrupt-bundle"],
)
async def test_a_run_whose_bundle_cannot_be_read_ends_refused_naming_why(
    stack, events, blob, named
):
    """A parse of a bundle that is not there (or not an archive) once stayed "requested"."""
    if blob is None:
        digest = "sha256:" + "1" * 64
    else:
        digest = await stack.bus.put_blob(blob)
    body = b'{"command": {"label": "parse", "bundle_digest": "%s"}, "run_id": "p1"}' % (
        digest.encode()
    )
    await stack.bus.js.publish("dbt.cmd.run.jaffle_shop", body)
    refused = await events.first(lambda e: isinstance(e, ev.RunRefused) and e.run_id == "p1")
    assert named in refused.reason


async def test_a_descriptor_value_that_would_be_a_flag_refuses_the_deploy(stack, project_copy):
    """Every argument list reaches dbt through one builder: a descriptor cannot smuggle a
    flag in either."""
    (project_copy / "jetdbt.yaml").write_text('select: ["orders", "--target-path", "/tmp/x"]\n')
    _, refused = await client.deploy(stack.bus, project_copy, "flags")
    assert isinstance(refused, ev.DeployRefused), refused
    assert "a --select value is '--target-path': a value cannot start with '-'" in refused.reason

"""Malformed commands published straight on NATS are refused with a reason, never dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from shared import events as ev
from tests.helpers import get_json, wait_for

VALID_RUN = b'{"command": {"label": "build"}}'


class Events:
    """Every event on dbt.evt.>, collected from a core subscription made before publishing."""

    def __init__(self):
        self.seen: list[ev.Event] = []
        self._arrived = asyncio.Condition()

    async def on_msg(self, msg) -> None:
        event = ev.decode(msg.data)
        async with self._arrived:
            self.seen.append(event)
            self._arrived.notify_all()

    async def first(self, match: Callable[[ev.Event], bool], timeout: float = 20) -> ev.Event:
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: any(match(e) for e in self.seen))
            return next(e for e in self.seen if match(e))


@pytest.fixture
async def events(stack):
    collected = Events()
    sub = await stack.bus.nc.subscribe("dbt.evt.>", cb=collected.on_msg)
    yield collected
    await sub.unsubscribe()


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
        (b'{"command": {"label": "seed"}}', "`$.command.label`"),
        (b'{"command": {"label": "build"}, "run_id": "Bad Id"}', "run id 'Bad Id' is invalid"),
    ],
    ids=["bad-json", "select-not-a-list", "unknown-key", "unknown-label", "bad-run-id"],
)
async def test_a_malformed_run_command_is_refused_naming_the_problem(stack, events, body, named):
    refused = await refused_run(stack, events, "dbt.cmd.run.jaffle_shop", body)
    assert refused.project == "jaffle_shop"
    assert named in refused.reason


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
        ("dbt.cmd.deploy.BadName", b'{"bundle_digest": "x", "bundle_size": 1}', "BadName"),
    ],
    ids=["bad-json", "missing-field", "bad-project"],
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

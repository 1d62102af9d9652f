"""Signed webhooks on one real stack: a run's failure posts one signed body to a real HTTP
server this test starts (its signature checked here), a receiver answering 500 twice gets
the third attempt, one that always fails gives up into the dead letters, every attempt is
readable, the hooks read model replays with 0 differences, and no secret is ever stored
where the notifier's bucket is not. A hook aimed at a closed port and one aimed at a port
that answers but not in HTTP (the test's own nats-server) record the same reason and none
of the bytes; an attempt recorded before that vocabulary is served in it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import urllib.parse

import aiohttp
import msgspec
import pytest
from jetdbt.projections.replay import replay
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import ModelsCommand, RunCommand
from jetdbt.shared.jobs import hook_reasons, webhooks

from tests.support.helpers import (
    auth_headers,
    collect_everything,
    deploy_and_wait,
    get_json,
    jetdbt,
    wait_for,
)
from tests.support.hook_receiver import Receiver

pytestmark = pytest.mark.dbt

PROJECT = "jaffle_shop"
BROKEN = "select * from a_table_nobody_made"


def _closed_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _verified(secret: str, headers: dict, body: bytes) -> bool:
    stamp = headers[webhooks.TIMESTAMP]
    mac = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers[webhooks.SIGNATURE], f"sha256={mac}")


async def _deliveries(stack, hook: str, state: str = "") -> list[dict]:
    url = f"{stack.api_url}/v1/projects/{PROJECT}/hooks/{hook}/deliveries"
    status, body = await get_json(url + (f"?state={state}" if state else ""))
    assert status == 200, body
    return body["deliveries"]


async def _add_by_api(stack, name: str, url: str, on: list[str], **more) -> tuple[int, dict]:
    api = f"{stack.api_url}/v1/projects/{PROJECT}/hooks"
    if "events" in more:
        on = more.pop("events")
    body = {"action": "add", "name": name, "url": url, "on": on, **more}
    async with (
        aiohttp.ClientSession() as session,
        session.post(api, json=body, headers=auth_headers(api)) as resp,
    ):
        return resp.status, await resp.json()


@pytest.mark.timeout(600)
async def test_a_failed_run_posts_signed_retried_and_dead_deliveries(settings, project_copy):
    (project_copy / "models" / "broken.sql").write_text(BROKEN)
    quick = msgspec.structs.replace(
        settings, webhook_hosts=("127.0.0.1",), webhook_retry_seconds=0.2, webhook_attempts=3
    )
    pager, flaky, gone, quiet = Receiver(200), Receiver(500, 500, 200), Receiver(500), Receiver(200)
    urls = [await r.start() for r in (pager, flaky, gone, quiet)]
    stack = await Stack(quick).start()
    try:
        await deploy_and_wait(stack.bus, project_copy, PROJECT)

        # The CLI's door (the operator): the secret is printed once.
        added = await jetdbt(stack, "hook", "add", "pager", "--project", PROJECT,
                             "--url", urls[0], "--on", "failure")  # fmt: skip
        assert added.returncode == 0, added.stderr
        secret = added.stdout.rsplit(": ", 1)[1].strip()
        assert len(secret) >= webhooks.MIN_SECRET
        # The API's door: the secret is the answer's, this once.
        secrets = [secret]
        nats_port = urllib.parse.urlsplit(stack.nats_url).port
        closed, nats = (f"http://127.0.0.1:{p}/h" for p in (_closed_port(), nats_port))
        for name, url, on in (("flaky", urls[1], ["end"]), ("gone", urls[2], ["failure"]),
                              ("quiet", urls[3], ["success"]), ("closed", closed, ["failure"]),
                              ("nats", nats, ["failure"])):  # fmt: skip
            status, answer = await _add_by_api(stack, name, url, on)
            assert status == 201, answer
            secrets.append(answer["secret"])
        # Hostile hooks are refused, naming why: another scheme, a host nobody allowed.
        for bad, why in (("ftp://127.0.0.1/x", "http or https"),
                         ("http://10.0.0.7/x", "JETDBT_WEBHOOK_HOSTS")):  # fmt: skip
            status, answer = await _add_by_api(stack, "bad", bad, ["failure"])
            assert status == 400 and why in answer["error"], answer
        for more, why in (({"secret": "short"}, "16 to 256"), ({"action": "rm"}, "action"),
                          ({"events": ["sometimes"]}, "--on")):  # fmt: skip
            status, answer = await _add_by_api(stack, "bad", urls[3], ["start"], **more)
            assert status == 400 and why in answer["error"], answer
        # A secret of one's own is kept as given; removing the hook tells it nothing more.
        status, answer = await _add_by_api(stack, "own", urls[3], ["start"], secret="s" * 20)
        assert status == 201 and answer["secret"] == "s" * 20, answer
        secrets.append(answer["secret"])
        api = f"{stack.api_url}/v1/projects/{PROJECT}/hooks"
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                api, json={"action": "remove", "name": "own"}, headers=auth_headers(api)
            ) as resp,  # fmt: skip
        ):
            assert resp.status == 200, await resp.text()

        run = await client.run(
            stack.bus, PROJECT, RunCommand(command=ModelsCommand(select=["broken"]))
        )
        assert run.result.status == "failed", run.result

        async def arrived():
            return len(flaky.got) == 3 and len(gone.got) == 3 and len(pager.got) == 1

        await wait_for(arrived, timeout=60)
        await asyncio.sleep(1)  # nothing more arrives
        assert len(pager.got) == 1 and len(flaky.got) == 3 and len(gone.got) == 3
        assert quiet.got == [], "a hook on success heard of a failure"

        headers, body = pager.got[0]
        assert _verified(secret, headers, body)
        assert not _verified(secrets[1], headers, body)  # another hook's secret does not sign it
        sent = msgspec.json.decode(body)
        assert sent["event"] == "failure" and sent["run"]["id"] == run.run_id
        assert sent["run"]["outcome"] == "failed" and sent["run"]["totals"]["failed"] == 1
        [failed] = sent["run"]["failed_nodes"]
        assert failed["unique_id"] == "model.jaffle_shop.broken"
        assert "a_table_nobody_made" in failed["message"]
        assert sent["links"]["api"] == f"{stack.api_url}/v1/runs/{run.run_id}"
        assert sent["links"]["viewer"].endswith(f"/ui/#/runs/{run.run_id}")
        # Every attempt of one delivery is the same delivery, signed with its own hook's secret.
        assert len({h[webhooks.DELIVERY] for h, _ in flaky.got}) == 1
        assert all(_verified(secrets[1], h, b) for h, b in flaky.got)

        async def recorded():
            return len(await _deliveries(stack, "flaky")) == 3 and await _deliveries(
                stack, "gone", "dead"
            )

        await wait_for(recorded, timeout=30)
        flaky_rows = sorted(await _deliveries(stack, "flaky"), key=lambda d: d["attempt"])
        assert [(d["status"], d["state"]) for d in flaky_rows] == [
            (500, "retrying"), (500, "retrying"), (200, "delivered"),
        ]  # fmt: skip
        [dead] = await _deliveries(stack, "gone", "dead")
        assert dead["attempt"] == 3 and dead["status"] == 500
        listed = await jetdbt(stack, "hook", "deliveries", "gone", "--project", PROJECT, "--dead")
        assert listed.returncode == 0 and "dead" in listed.stdout, listed.stderr

        # No answer, or one that is not HTTP: the same reason, none of what was sent back.
        async def unanswered():
            return all([await _deliveries(stack, h, "dead") for h in ("closed", "nats")])

        await wait_for(unanswered, timeout=30)
        for hook in ("closed", "nats"):
            rows = await _deliveries(stack, hook)
            assert [(d["status"], d["error"]) for d in rows] == [
                (0, hook_reasons.NO_HTTP_ANSWER)
            ] * 3, rows

        status, hooks = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/hooks")
        assert status == 200 and [h["name"] for h in hooks["hooks"]] == [
            "closed", "flaky", "gone", "nats", "pager", "quiet",
        ]  # fmt: skip

        # The secrets are nowhere else: no event, log line, command, blob or projection row,
        # and no API answer but the add's.
        stored = b"\n".join(await collect_everything(stack))
        answered = msgspec.json.encode(hooks)
        for s in secrets:
            assert s.encode() not in stored and s.encode() not in answered
        assert b"server_id" not in stored  # nats-server's INFO line, as the port answered

        # An attempt recorded before the vocabulary, quoting that line: served mapped.
        quoted = "ClientResponseError: 400, message='Bad status line b\\'INFO {\"server_id\"'"
        await stack.bus.publish(
            ev.HookDelivered(project=PROJECT, hook="nats", delivery_id="before", run_id=run.run_id,
                             event="failure", attempt=1, state="dead", error=quoted)
        )  # fmt: skip

        async def served():
            return [d for d in await _deliveries(stack, "nats") if d["delivery_id"] == "before"]

        [before] = await wait_for(served, timeout=30)
        assert before["error"] == hook_reasons.NO_HTTP_ANSWER, before

        removed = await jetdbt(stack, "hook", "remove", "quiet", "--project", PROJECT)
        assert removed.returncode == 0, removed.stderr

        async def settled():
            _, body = await get_json(f"{stack.api_url}/v1/projections")
            return all(p["lag"] == 0 for p in body["projections"])

        await wait_for(settled, timeout=30)
        report = await replay(stack.bus, stack.database_url, quick.schema, ["hooks"])
        assert report.differences == 0, report
        rows = {t.table: (t.live_rows, t.shadow_rows) for t in report.tables}
        assert rows == {"hooks": (5, 5), "hook_deliveries": (14, 14)}, rows
    finally:
        await stack.stop()
        for r in (pager, flaky, gone, quiet):
            await r.runner.cleanup()

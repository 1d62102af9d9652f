"""A run's log: followed while it goes (CLI and API), paged, kept as an object at its end,
read from that object once DBT_LOGS has lost its lines; hostile parameters refused."""

from __future__ import annotations

import asyncio

import aiohttp
import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.streams import LOGS
from jetdbt.shared.runs import run_logs

from tests.support.gate import add_gate, until_gate_runs
from tests.support.helpers import JETDBT, auth_headers, cli_env, deploy_and_wait, get_json, wait_for

RUN = "logged1"


async def _follow_api(url: str) -> list[dict]:
    """Every NDJSON record of a followed log, keepalives left out."""
    records = []
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=auth_headers(url)) as resp,
    ):
        assert resp.status == 200 and resp.content_type == "application/x-ndjson"
        async for raw in resp.content:
            if raw.strip():
                records.append(msgspec.json.decode(raw))
    return records


@pytest.mark.dbt
async def test_a_runs_log_is_followed_paged_kept_and_read_from_its_object(
    stack, project_copy, tmp_path
):
    release = tmp_path / "release"
    add_gate(project_copy, release)
    await deploy_and_wait(stack.bus, project_copy, "jaffle_shop")
    running = asyncio.create_task(
        client.run(stack.bus, "jaffle_shop", RunCommand(command=BuildCommand(), run_id=RUN))
    )
    await until_gate_runs(stack.api_url, RUN)
    logs = f"{stack.api_url}/v1/runs/{RUN}/logs"

    # The CLI and the API follow while dbt holds the gate model open.
    cli = await asyncio.create_subprocess_exec(
        JETDBT,
        "logs",
        RUN,
        "--follow",
        env=cli_env(stack),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    api = asyncio.create_task(_follow_api(f"{logs}?follow=true"))
    first = await asyncio.wait_for(cli.stdout.readline(), 60)
    assert first.strip() and cli.returncode is None  # a line, and still following
    status, live = await get_json(f"{logs}?limit=3")
    assert status == 200 and live["status"] is None and live["source"] == "stream"
    assert [x["line"] for x in live["lines"]] == [1, 2, 3] and live["next"] == {"after": 3}
    assert not api.done()

    release.touch()
    final = await asyncio.wait_for(running, 180)
    assert final.result.status == "passed", final.result.error
    rest, err = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0, err.decode()
    printed = [first.decode().rstrip("\n"), *rest.decode().splitlines()]
    assert printed[-1] == f"jetdbt: run {RUN} passed (attempt 1)"
    followed = await asyncio.wait_for(api, 60)
    assert followed[-1] == {"end": "passed"}
    assert [r["text"] for r in followed[:-1]] == printed

    # The whole log is kept as the run's own object, said before RunFinished.
    kept = await stack.bus.last_event(subjects.run_event("jaffle_shop", RUN, "log_kept"))
    assert isinstance(kept, ev.RunLogKept) and kept.lines == len(printed)
    assert kept.object == run_logs.object_name(RUN)
    store = await stack.bus.js.object_store("DBT_BLOBS")
    assert run_logs.decode((await store.get(kept.object)).data) == printed

    async def recorded():
        status, body = await get_json(f"{stack.api_url}/v1/runs/{RUN}")
        return body if status == 200 and body.get("log_lines") else None

    record = await wait_for(recorded)
    assert record["log_object"] == kept.object and record["log_lines"] == len(printed)
    assert record["files_pruned_at"] is None

    async def every_page() -> tuple[list[str], set[str]]:
        texts, sources, after = [], set(), 0
        while after is not None:
            status, body = await get_json(f"{logs}?after={after}&limit=7")
            assert status == 200, body
            texts += [x["text"] for x in body["lines"]]
            sources.add(body["source"])
            after = body["next"]["after"] if body["next"] else None
        return texts, sources

    assert await every_page() == (printed, {"stream"})
    # DBT_LOGS forgets (7 days, a byte limit): the kept object answers the same pages.
    await stack.bus.js.purge_stream(LOGS, subject=subjects.run_log(RUN))
    assert await every_page() == (printed, {"object"})
    # Following an ended run answers the lines after `after`, then the end.
    tail = await _follow_api(f"{logs}?follow=true&after={len(printed) - 1}")
    assert tail == [{"line": len(printed), "text": printed[-1]}, {"end": "passed"}]
    cli_after = await asyncio.create_subprocess_exec(
        JETDBT, "logs", RUN, env=cli_env(stack), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await cli_after.communicate()
    assert cli_after.returncode == 0 and out.decode().splitlines() == printed


async def test_log_route_refuses_hostile_parameters(stack):
    base = f"{stack.api_url}/v1/runs"
    await stack.bus.publish(ev.RunRefused(project="p", run_id="known", reason="test"))
    cases = [
        (f"{base}/Bad..Id/logs", 400, "run id"),
        (f"{base}/{'x' * 200}/logs", 400, "run id"),
        (f"{base}/nobody/logs", 404, "run 'nobody' not found"),
        (f"{base}/known/logs?limit=-1", 400, "'limit'"),
        (f"{base}/known/logs?limit=0", 400, "'limit'"),
        (f"{base}/known/logs?limit=abc", 400, "'limit'"),
        (f"{base}/known/logs?after=-3", 400, "'after'"),
        (f"{base}/known/logs?after=99999999999999999999999", 400, "'after'"),
        (f"{base}/known/logs?follow=maybe", 400, "'follow'"),
    ]
    for url, want, said in cases:
        status, body = await get_json(url)
        assert (status, said in body.get("error", "")) == (want, True), (url, status, body)
    # A huge limit reads as the route's maximum, as on every paged route.
    status, body = await get_json(f"{base}/known/logs?limit=99999999999999999999")
    assert status == 200 and body["lines"] == [] and body["next"] is None
    assert body["status"] == "refused"

"""The live event stream: every run and node event of one run, in stream order, resumable.

The events are published on the real bus as a runner would, so the test controls when
the run ends; the viewer's browser test sees the same stream during a real dbt build.
"""

from __future__ import annotations

import asyncio

import aiohttp
from jetdbt.shared.bus import events as ev

from tests.support.helpers import auth_headers

RUN = "sse1"
PROJECT = "ssep"


def _node(uid: str) -> list[ev.Event]:
    result = ev.NodeResult(unique_id=uid, status="success", outcome="passed", resource_type="model")
    return [
        ev.NodeStarted(project=PROJECT, run_id=RUN, attempt=1, unique_id=uid),
        ev.NodeFinished(project=PROJECT, run_id=RUN, attempt=1, node=result),
    ]


def _final() -> ev.RunFinished:
    result = ev.RunResult(
        status="passed",
        engine="dbt-core",
        engine_version="1.11",
        mode="build",
        totals={"passed": 2},
        nodes=[],
        exit_code=0,
    )
    return ev.RunFinished(project=PROJECT, run_id=RUN, attempt=1, result=result)


async def _read(session, url: str, last_id: int | None = None) -> list[tuple[int, str, bytes]]:
    """(id, event name, data) of every SSE message until the server ends the stream."""
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    got, fields = [], {}
    async with session.get(url, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "text/event-stream"
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if "id" in fields:
                    got.append((int(fields["id"]), fields["event"], fields["data"].encode()))
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    return got


async def test_stream_is_live_ends_with_the_run_and_resumes_exactly(stack):
    bus = stack.bus
    url = f"{stack.api_url}/v1/runs/{RUN}/events"
    first = [
        ev.RunRequested(project=PROJECT, run_id=RUN, command={"label": "build"}),
        ev.RunStarted(project=PROJECT, run_id=RUN, attempt=1, version="v1"),
        *_node("model.ssep.a"),
    ]
    for event in first:
        await bus.publish(event)
    # Another run's events and this run's log lines are not this stream's.
    await bus.publish(ev.RunRequested(project=PROJECT, run_id="other", command={}))
    async with aiohttp.ClientSession(headers=auth_headers(url)) as session:
        live = asyncio.create_task(_read(session, url))
        await asyncio.sleep(0.5)
        assert not live.done(), "the stream ended before the run did"
        for event in [*_node("model.ssep.b"), _final()]:
            await bus.publish(event)
        got = await asyncio.wait_for(live, 10)
        assert [e for _, e, _ in got] == [
            "run.requested",
            "run.started",
            "node.started",
            "node.finished",
            "node.started",
            "node.finished",
            "run.finished",
        ]
        ids = [i for i, _, _ in got]
        assert ids == sorted(set(ids))
        assert ev.decode(got[-1][2]).run_id == RUN
        # Resumed after the third event: exactly the four after it, none twice.
        assert await _read(session, url, ids[2]) == got[3:]
        # Resumed after the final event: the run is over, an empty stream at once.
        assert await asyncio.wait_for(_read(session, url, ids[-1]), 5) == []


async def test_refusals(stack):
    await stack.bus.publish(ev.RunRequested(project=PROJECT, run_id=RUN, command={}))
    url = f"{stack.api_url}/v1/runs/{RUN}/events"
    async with aiohttp.ClientSession(headers=auth_headers(url)) as session:
        for bad in ("-1", "12abc", "9" * 40, "１２"):
            async with session.get(url, headers={"Last-Event-ID": bad}) as resp:
                assert resp.status == 400
                assert "Last-Event-ID" in (await resp.json())["error"]
        async with session.get(f"{stack.api_url}/v1/runs/nosuch/events") as resp:
            assert resp.status == 404
            assert "nosuch" in (await resp.json())["error"]
        async with session.get(f"{stack.api_url}/v1/runs/Bad.Id/events") as resp:
            assert resp.status == 400


async def test_another_teams_token_cannot_read_a_runs_events(stack):
    """Scoped by the project the log files the run under, whether or not it is projected."""
    from jetdbt.shared.identity import principals

    await stack.bus.publish(ev.RunRequested(project=PROJECT, run_id=RUN, command={}))
    _, bearer = await principals.create_token(
        stack.bus, principal="stranger", team="elsewhere", role="viewer"
    )
    url = f"{stack.api_url}/v1/runs/{RUN}/events"
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers={"Authorization": f"Bearer {bearer}"}) as resp:
            assert resp.status == 403, await resp.text()
        async with session.get(url) as resp:
            assert resp.status == 401

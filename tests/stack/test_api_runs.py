"""The API's run routes: a POSTed command goes onto the bus once, and the run reads back."""

from __future__ import annotations

import aiohttp

from projections.folds.progress_tables import COUNT_COLUMNS, RUN_COLUMNS
from shared.streams import COMMANDS
from tests.support.helpers import auth_headers, get_json, wait_for


async def test_a_posted_run_is_published_once_and_reads_back(stack):
    url = f"{stack.api_url}/v1/projects/never_deployed/runs"
    body = {"command": {"label": "build"}, "run_id": "a1"}
    async with aiohttp.ClientSession(headers=auth_headers(url)) as session:
        for _ in range(2):  # the same run id twice: one command, by its message id
            async with session.post(url, json=body) as resp:
                assert resp.status == 202
                assert await resp.json() == {"run_id": "a1", "project": "never_deployed"}
    assert (await stack.bus.js.stream_info(COMMANDS)).state.messages == 1

    async def refused():
        status, run = await get_json(f"{stack.api_url}/v1/runs/a1")
        return run if status == 200 and run["status"] == "refused" else None

    run = await wait_for(refused)
    listed = [c for c in RUN_COLUMNS if c != "result"] + list(COUNT_COLUMNS)
    assert set(run) == {*listed, "result", "nodes"}
    assert "has no deployed version" in run["refused_reason"]
    assert run["result"] is None and run["nodes"] == []
    _, runs = await get_json(url)
    assert [set(r) for r in runs["runs"]] == [set(listed)]

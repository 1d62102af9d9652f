"""The API's run routes: a POSTed command goes onto the bus once, and the run reads back."""

from __future__ import annotations

import aiohttp
from jetdbt.projections.progress.tables import COUNT_COLUMNS, RUN_COLUMNS
from jetdbt.services.cli import tables
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.streams import COMMANDS

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


async def test_runs_are_listed_by_environment_and_an_old_run_is_the_default_ones(stack):
    """A run requested before environments (no `environment`) folds as `prod`; a filter keeps
    one environment's runs; a name that is no environment name is a 400 naming it."""
    project = "envs_listed"
    for run_id, environment, pr in (("e-old", "", 0), ("e-stg", "staging", 0), ("e-pr", "", 4)):
        await stack.bus.publish(
            ev.RunRequested(
                project=project, run_id=run_id, command={"label": "build"},
                environment=environment, pr=pr,
            )
        )  # fmt: skip
    url = f"{stack.api_url}/v1/projects/{project}/runs"

    async def listed(query: str):
        status, body = await get_json(url + query)
        assert status == 200, body
        return {r["run_id"]: (r["environment"], r["pr"]) for r in body["runs"]} or None

    async def all_three():
        found = await listed("")
        return found if found and len(found) == 3 else None

    every = await wait_for(all_three)
    assert every == {"e-old": ("prod", 0), "e-stg": ("staging", 0), "e-pr": ("prod", 4)}
    assert await listed("?environment=prod") == {"e-old": ("prod", 0), "e-pr": ("prod", 4)}
    assert await listed("?environment=staging") == {"e-stg": ("staging", 0)}
    assert await listed("?environment=dev") is None
    status, body = await get_json(url + "?environment=Prod%3B%20drop")
    assert status == 400 and "query parameter 'environment'" in body["error"], body
    assert "'Prod; drop' is invalid" in body["error"], body
    _, answer = await get_json(url + "?environment=prod")
    table = tables.runs_table(answer, "prod").splitlines()
    assert table[0].split()[:4] == ["run", "id", "status", "env"]
    assert any(line.split()[:3] == ["e-pr", "requested", "prod"] for line in table), table
    assert "pr 4" in next(line for line in table if line.startswith("e-pr"))
    assert tables.runs_table({"project": project, "runs": []}, "dev") == (
        f"project {project} has no runs in environment dev yet"
    )

"""A token reads only its team's runs, also before the projection has folded a run: the
routes that learn a run's project from the event log scope it by that project."""

from __future__ import annotations

from shared import events as ev
from shared import identity, subjects
from tests.helpers import get_json


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
    _, bearer = await identity.create_token(
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

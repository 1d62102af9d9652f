"""The run viewer as a daily tool, in Debian's headless Chromium against a real stack.

One build of the example (gated, with a model that fails and a test of it that is then
skipped) is looked at the way a person would: a second run's queue reason while it waits
(then cancelled from its page), the failure panel and the test badges without a click,
a node's panel with the SQL dbt compiled for it and its history, the timeline, a focus
by dbt selector and one that matches nothing, the project's lineage page, and a run of a
node and its children started from it, then run again with the same arguments; the
failed run's dbt artifacts are served as they were stored until that run makes retention
remove them. Synthetic runs check the timeline at 500 nodes, a viewer's disabled actions
and a node a cancel stopped, without dbt. Screenshots go to tests/artifacts/ (ignored by
git).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.identity import principals

from tests.support import synthetic
from tests.support.gate import GATE, until_gate_runs
from tests.support.helpers import auth_headers, get_json, wait_for
from tests.support.viewer import (
    ARTIFACTS,
    BROKEN,
    browser,
    build_in_background,
    deployed_with_gate,
    go_to,
    run_page,
)

ORDERS = "model.jaffle_shop.orders"
STG_ORDERS = "model.jaffle_shop.stg_orders"
STG_CUSTOMERS = "model.jaffle_shop.stg_customers"
# Each drawn node's label, and the outcomes of the tests folded into it, as the page has them.
_BADGES = """() => viewer.cy.nodes().map((n) => ({ id: n.id(), label: n.data('label'),
  tests: viewer.testsOf(n.id()).map((t) => viewer.status(t)) }))"""


@pytest.fixture
def settings(settings):
    """Each environment keeps the files of its newest run only (and of the run a retry would
    resume): the run that follows the failed one removes its artifacts, which then answer a
    404 naming retention."""
    return msgspec.structs.replace(settings, run_retention=1)


async def _artifact(api_url: str, run_id: str, name: str) -> tuple[int, bytes]:
    url = f"{api_url}/v1/runs/{run_id}/artifacts/{name}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=auth_headers(url)) as r:
        return r.status, await r.read()


def _marks(label: str) -> dict[str, int]:
    """`orders ✓4 ⚠1` as {"✓": 4, "⚠": 1}."""
    return {part[0]: int(part[1:]) for part in label.split()[1:]}


def _check_badges(badges: list[dict]) -> None:
    """A ✓ counts only tests that passed, a ✗ only those that failed; a warning is ⚠."""
    for b in badges:
        marks = _marks(b["label"])
        assert marks.get("✓", 0) == b["tests"].count("passed"), b
        assert marks.get("✗", 0) == b["tests"].count("failed"), b
        assert marks.get("⚠", 0) == b["tests"].count("warned"), b


async def _shot(page, name: str) -> None:
    await page.screenshot(path=ARTIFACTS / name, full_page=True)


@pytest.mark.dbt
async def test_a_failed_run_reads_at_a_glance_and_a_node_and_its_children_run_from_the_page(
    stack, project_copy, tmp_path
):
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    release = tmp_path / "release"
    marts = project_copy / "models" / "marts"
    (marts / "broken.sql").write_text("select no_such_column from {{ ref('orders') }}\n")
    (marts / "broken.yml").write_text(
        "models:\n  - name: broken\n    columns:\n      - name: no_such_column\n"
        "        data_tests: [not_null]\n"
    )
    await deployed_with_gate(stack, project_copy, release)
    # The page speaks for the operator who built the failed run: the run it starts is then
    # the one a retry of theirs resumes, so retention may remove the failed run's files.
    me = client.principal()
    _, bearer = await principals.create_token(stack.bus, principal=me, team="default", role="admin")
    held = build_in_background(stack, "daily1")
    await until_gate_runs(stack.api_url, "daily1")
    waiting = build_in_background(stack, "daily2")  # same project: it waits for the held run

    async with async_playwright() as pw:
        chromium = await browser(pw)
        page, errors = await run_page(chromium, stack, bearer, "daily2")
        queue = page.locator("#queue")
        await queue.wait_for(timeout=90_000)  # a loaded machine takes its time to queue it
        said = await queue.inner_text()
        _, run = await get_json(f"{stack.api_url}/v1/runs/daily2")
        assert run["queue_reason"] and run["queue_reason"] in said, (said, run["queue_reason"])
        assert f"place {run['queue_position']}" in said
        assert "build" in await page.inner_text("#run-facts")
        await _shot(page, "daily-queued.png")
        await page.click("#cancel")  # the page's cancel: a queued run never starts
        await page.wait_for_selector("#run-header .pill.cancelled", timeout=60_000)
        assert (await asyncio.wait_for(waiting, 60)).result.status == "cancelled"

        release.touch()
        assert (await asyncio.wait_for(held, 180)).result.status == "failed"
        await wait_for(lambda: _finished(stack.api_url, "daily1"), timeout=30)
        await go_to(page, "'#/runs/daily1'")
        # What failed and why, without a click: the broken model with dbt's message, then
        # the warning of the accepted_values test.
        failed = await page.inner_text("#failed-nodes")
        assert "broken" in failed and "no_such_column" in failed
        assert "accepted_values" in await page.inner_text("#warned-nodes")
        badges = await page.evaluate(_BADGES)
        _check_badges(badges)
        by_id = {b["id"]: b for b in badges}
        assert _marks(by_id[BROKEN]["label"]) == {"⊘": 1}  # its test skipped: no ✓
        assert _marks(by_id[ORDERS]["label"]).keys() == {"✓", "⚠"}  # a warning is no ✗
        started = await page.evaluate("viewer.cy.nodes().length")
        bars = await page.locator("#timeline-svg rect.bar").count()
        _, recorded = await get_json(f"{stack.api_url}/v1/runs/daily1")
        assert bars == sum(1 for n in recorded["nodes"] if n["started_at"]) > started
        assert all(n["thread"] for n in recorded["nodes"] if n["started_at"])
        await _shot(page, "daily-failed-run.png")

        # dbt's artifacts of the run, as it wrote them (the stored blobs, undecoded).
        served = {}
        for name in ("run_results.json", "manifest.json"):
            status, served[name] = await _artifact(stack.api_url, "daily1", name)
            assert status == 200, served[name][:300]
            assert served[name] == await stack.bus.get_blob(recorded["artifacts"][name])
        results = json.loads(served["run_results.json"])
        assert "run-results" in results["metadata"]["dbt_schema_version"]
        assert {r["unique_id"] for r in results["results"]} == {
            n["unique_id"] for n in recorded["nodes"] if n["status"] != "running"
        }
        assert b'"compiled_code"' in served["run_results.json"]  # dbt's fields, not jetdbt's
        assert BROKEN in json.loads(served["manifest.json"])["nodes"]

        # A node's panel: the SQL dbt compiled for it in this run, what the graph says of
        # it, its history.
        await page.evaluate(f"viewer.select({ORDERS!r})")
        compiled = page.locator("#panel pre#compiled-sql")
        await compiled.wait_for(timeout=10_000)
        assert "stg_orders" in await compiled.inner_text()
        assert "{{" not in await compiled.inner_text()  # compiled, not raw
        panel = await page.inner_text("#panel")
        assert "One row per order" in panel and "status" in panel
        assert await page.locator("#history rect.history-bar").count() == 1
        await _shot(page, "daily-node-panel.png")

        # Focus by a dbt selector, and a focus that matches nothing says so.
        await go_to(page, "'#/runs/daily1?focus=' + encodeURIComponent('orders+')")
        drawn = await page.evaluate("viewer.cy.nodes().map(n => n.id()).sort()")
        assert drawn == sorted([ORDERS, BROKEN, GATE, "model.jaffle_shop.customers"])
        await _shot(page, "daily-focus-selector.png")
        await page.evaluate("location.hash = '#/runs/daily1?focus=orderz'")
        no_such = page.locator("#no-such-node")
        await no_such.wait_for(timeout=30_000)
        assert "no such node" in await no_such.inner_text()

        # The project's lineage: the deployed graph, where it came from, its relations.
        await go_to(page, "'#/projects/jaffle_shop'")
        assert "as of deploy" in await page.inner_text("#provenance")
        assert await page.evaluate("viewer.cy.nodes().length") >= 7
        relation = page.locator("#relations a[href*='customers']").first
        assert "dbt://main/jaffle_shop/customers" in await relation.inner_text()
        await page.evaluate(f"viewer.select({STG_ORDERS!r})")
        await _shot(page, "daily-lineage.png")

        # Run stg_orders and its children from the page, then read the run that follows.
        await page.click("#run-children")
        await page.wait_for_function("location.hash.startsWith('#/runs/')", timeout=10_000)
        run_id = (await page.evaluate("location.hash")).removeprefix("#/runs/")
        await page.wait_for_selector("body[data-run-ended='1']", state="attached", timeout=180_000)
        await _shot(page, "daily-children-run.png")
        badges = await page.evaluate(_BADGES)
        _check_badges(badges)
        by_id = {b["id"]: b for b in badges}
        assert "✓" not in by_id[STG_CUSTOMERS]["label"]  # not selected: no badge at all
        assert await page.evaluate(f"viewer.status({STG_CUSTOMERS!r})") == "not_selected"

        # Run it again with the same arguments: a new run of the same command.
        await page.click("#run-again")
        await page.wait_for_function(f"location.hash !== '#/runs/{run_id}'", timeout=10_000)
        again = (await page.evaluate("location.hash")).removeprefix("#/runs/")
        await wait_for(lambda: _finished(stack.api_url, again), timeout=180)
        await chromium.close()

    # The run that followed was the environment's newest: the failed one's files are gone.
    await wait_for(lambda: _finished(stack.api_url, run_id), timeout=30)
    status, body = await _artifact(stack.api_url, "daily1", "manifest.json")
    assert status == 404 and "retention" in json.loads(body)["error"], body
    _, child = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
    assert child["command"]["select"] == ["stg_orders+"]
    _, repeated = await get_json(f"{stack.api_url}/v1/runs/{again}")
    assert again != run_id and repeated["command"] == child["command"]
    assert child["requested_by"] == me
    ran = {n["unique_id"] for n in child["nodes"] if n["resource_type"] == "model"}
    assert ran == {STG_ORDERS, ORDERS, BROKEN, GATE, "model.jaffle_shop.customers"}
    assert errors == []


async def _finished(api_url: str, run_id: str) -> bool:
    status, run = await get_json(f"{api_url}/v1/runs/{run_id}")
    return status == 200 and run["finished_at"] is not None


def _on_threads(e: ev.Event) -> ev.Event:
    """A node's finish named with one of four dbt threads, as a build with threads: 4 has."""
    if not isinstance(e, ev.NodeFinished):
        return e
    thread = f"Thread-{int(e.node.name[1:]) % 4 + 1}"
    return msgspec.structs.replace(e, node=msgspec.structs.replace(e.node, thread=thread))


async def test_a_500_node_timeline_a_viewers_disabled_actions_and_a_cancelled_node(stack):
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    # The project is team ops's (its deployer's): a viewer of ops may read it, not run it.
    await stack.bus.publish(
        ev.DeployRequested(
            project="synth",
            deploy_id="d0",
            bundle_digest=f"sha256:{0:064x}",
            bundle_size=1,
            team="ops",
        )
    )
    events = map(_on_threads, synthetic.run_events("synth", "wide", 0, nodes=500))
    await synthetic.publish(stack.bus, events)
    await synthetic.publish(stack.bus, _cancelled_mid_node("stopped"))
    await wait_for(lambda: _finished(stack.api_url, "wide"), timeout=60)
    await wait_for(lambda: _finished(stack.api_url, "stopped"), timeout=60)
    _, bearer = await principals.create_token(
        stack.bus, principal="vic", team="ops", role="viewer", project="*"
    )
    async with async_playwright() as pw:
        chromium = await browser(pw)
        page, errors = await run_page(chromium, stack, bearer, "wide")
        await page.wait_for_selector("#timeline-svg", timeout=90_000)
        assert await page.locator("#timeline-svg rect.bar").count() == 500
        lanes = await page.evaluate(
            "[...document.querySelectorAll('#timeline-svg > text')].map(t => t.textContent)"
        )
        assert sorted(t for t in lanes if t.startswith("Thread-")) == [
            "Thread-1",
            "Thread-2",
            "Thread-3",
            "Thread-4",
        ]
        took = await page.evaluate(
            "performance.getEntriesByName('jetdbt:timeline-drawn')[0].duration"
        )
        assert took < 1000, took
        await _shot(page, "daily-timeline-500.png")
        again = page.locator("#run-again")
        assert await again.is_disabled()  # the API would refuse a viewer's POST
        assert await again.get_attribute("title") == "needs role runner; this token has viewer"

        # A run cancelled while a node ran: the node is drawn cancelled, never running.
        await page.evaluate("location.hash = '#/runs/stopped'")
        await page.wait_for_selector("#run-header .pill.cancelled", timeout=30_000)
        assert await page.evaluate("viewer.status('model.synth.m0')") == "cancelled"
        await chromium.close()
    assert errors == []


def _cancelled_mid_node(run_id: str):
    """A run whose first node started and never finished: the run was cancelled."""
    events = list(synthetic.run_events("synth", run_id, 1))
    first = next(e for e in events if isinstance(e, ev.NodeStarted))
    yield from (e for e in events if isinstance(e, ev.RunRequested | ev.RunStarted))
    yield first
    yield ev.RunFinished(
        project="synth",
        run_id=run_id,
        attempt=1,
        at=first.at,
        result=ev.RunResult(
            status="cancelled",
            engine="dbt-core-1x",
            engine_version="1.10.4",
            mode="build",
            totals={},
            nodes=[],
            exit_code=130,
            cancelled_by="vic",
        ),
    )

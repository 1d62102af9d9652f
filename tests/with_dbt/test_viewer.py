"""The run viewer in a real browser: Debian's headless Chromium against a real stack and dbt.

The example project gets a gate model (held until the test releases it) and a model
that fails; the run page is opened while the build runs. Screenshots go to
tests/artifacts/ (kept by CI as the test's artifacts, ignored by git).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from playwright.async_api import TimeoutError as PlaywrightTimeout

from tests.support.gate import GATE, until_gate_runs
from tests.support.viewer import (
    ARTIFACTS,
    BROKEN,
    browser,
    build_in_background,
    deployed_with_gate,
    go_to,
    run_page,
)

pytestmark = pytest.mark.dbt

PASSED_RGB = "rgb(46,157,79)"
FAILED_RGB = "rgb(217,54,54)"


def _colour(value: str) -> str:
    return value.replace(" ", "")


async def test_the_run_page_is_live_and_a_failure_is_red_with_its_message(
    stack, project_copy, tmp_path
):
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    release = tmp_path / "release"
    (project_copy / "models" / "marts" / "broken.sql").write_text(
        "select no_such_column from {{ ref('orders') }}\n"
    )
    bearer = await deployed_with_gate(stack, project_copy, release)
    run = build_in_background(stack, "view1")
    await until_gate_runs(stack.api_url, "view1")

    async with async_playwright() as pw:
        chromium = await browser(pw)
        # The page's policy forbids eval; the test's waits evaluate their conditions.
        page, errors = await run_page(chromium, stack, bearer, "view1")
        await page.wait_for_function(
            f"window.viewer && viewer.status({GATE!r}) === 'running'", timeout=30_000
        )
        await page.evaluate("window.notReloaded = true")
        await page.screenshot(path=ARTIFACTS / "run-live.png")
        assert not run.done()

        release.touch()
        await page.wait_for_function(f"viewer.status({GATE!r}) === 'passed'", timeout=60_000)
        assert await page.evaluate("window.notReloaded") is True
        assert _colour(await page.evaluate(f"viewer.colour({GATE!r})")) == PASSED_RGB

        final = await asyncio.wait_for(run, 120)
        assert final.result.status == "failed"
        await page.wait_for_selector("body[data-run-ended='1']", timeout=30_000)
        assert await page.evaluate(f"viewer.status({BROKEN!r})") == "failed"
        assert _colour(await page.evaluate(f"viewer.colour({BROKEN!r})")) == FAILED_RGB
        # The graph is below the failure panel: scrolled to the top, so all of it is on screen.
        panel = page.locator("#panel")
        for attempt in range(3):  # a person clicks again when a busy page missed the click
            await page.evaluate("document.getElementById('graph').scrollIntoView()")
            at = await page.evaluate(f"viewer.position({BROKEN!r})")
            await page.mouse.click(at["x"], at["y"])  # a person clicks the red node
            try:
                await panel.locator("pre.message").wait_for(timeout=10_000)
                break
            except PlaywrightTimeout:
                if attempt == 2:
                    raise
        assert "no_such_column" in await panel.inner_text()
        assert "failed" in await panel.inner_text()
        assert "Raw SQL" in await panel.inner_text()
        await page.screenshot(path=ARTIFACTS / "run-failed.png")

        # Focus: orders and its nodes one step up and down, nothing else drawn.
        await go_to(page, "'#/runs/view1?focus=model.jaffle_shop.orders&depth=1'")
        drawn = await page.evaluate("viewer.cy.nodes().map(n => n.id()).sort()")
        assert drawn == sorted(
            f"model.jaffle_shop.{name}"
            for name in ("orders", "stg_orders", "stg_payments", "customers", "broken", "gate")
        )

        # The relation page of customers lists the run that built it.
        key = "dbt://main/jaffle_shop/customers"
        await page.evaluate(f"location.hash = '#/relations/' + encodeURIComponent({key!r})")
        try:
            await page.wait_for_selector("#relation-runs >> text=view1", timeout=30_000)
        except Exception:
            await page.screenshot(path=ARTIFACTS / "relation.png")
            raise AssertionError(await page.inner_html("#view")) from None
        await page.screenshot(path=ARTIFACTS / "relation.png")

        # The project's page lists the run with its outcome, newest first, and what each
        # environment runs.
        await page.evaluate("location.hash = '#/projects/jaffle_shop'")
        await page.wait_for_selector("text=view1", timeout=10_000)
        assert await page.locator("td", has_text="prod").count() >= 1
        await page.screenshot(path=ARTIFACTS / "project.png")
        # Its runs kept to one environment: the run's own (prod) lists it, another does not.
        await page.click("#view table a[href*='env=prod']")
        await page.wait_for_selector("#runs-filter code:text('prod')", timeout=10_000)
        await page.wait_for_selector("text=view1", timeout=10_000)
        await page.evaluate("location.hash = '#/projects/jaffle_shop?env=staging'")
        await page.wait_for_selector("#runs-filter code:text('staging')", timeout=10_000)
        assert "view1" not in await page.inner_text("#view table:last-of-type")
        await chromium.close()
    assert errors == []


async def test_a_page_opened_before_its_run_starts_draws_the_graph_when_it_starts(
    stack, project_copy, tmp_path
):
    """A queued run has no version yet, so no graph: the page draws it on run.started."""
    from playwright.async_api import async_playwright

    release = tmp_path / "release"
    bearer = await deployed_with_gate(stack, project_copy, release)
    held = build_in_background(stack, "held")
    await until_gate_runs(stack.api_url, "held")
    late = build_in_background(stack, "late")  # same project: it waits for the held run
    async with async_playwright() as pw:
        chromium = await browser(pw)
        page, errors = await run_page(chromium, stack, bearer, "late")
        await page.wait_for_selector("#run-header >> text=queued", timeout=30_000)
        assert await page.evaluate("viewer.cy") is None

        release.touch()
        await asyncio.wait_for(held, 120)
        await page.wait_for_function(
            f"viewer.cy && viewer.status({GATE!r}) === 'passed'", timeout=120_000
        )
        assert _colour(await page.evaluate(f"viewer.colour({GATE!r})")) == PASSED_RGB
        assert await page.evaluate("viewer.cy.nodes().length") > 5
        await page.wait_for_selector("body[data-run-ended='1']", state="attached", timeout=60_000)
        await chromium.close()
    assert (await asyncio.wait_for(late, 60)).result.status == "passed"
    assert errors == []


async def test_the_viewer_asks_for_a_token_and_never_shows_data_without_one(stack):
    from playwright.async_api import async_playwright

    async with aiohttp.ClientSession() as session:
        async with session.get(f"{stack.api_url}/ui/app.js") as resp:
            assert resp.status == 200  # the page's files hold no data: no token needed
            assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
        for path in ("/ui/index.html%2F..", "/ui/secret", "/ui/app.js.map"):
            async with session.get(f"{stack.api_url}{path}") as resp:
                assert resp.status in (401, 404), path
        async with session.get(f"{stack.api_url}/v1/projects") as resp:
            assert resp.status == 401

    async with async_playwright() as pw:
        chromium = await browser(pw)
        page = await chromium.new_page(bypass_csp=True)
        await page.goto(f"{stack.api_url}/ui/#/projects")
        assert await page.is_visible("#token-dialog")
        await page.fill("#token-input", "jdbt_not_a_token")
        await page.click("#token-form button[type=submit]")
        problem = page.locator("#token-problem")
        await problem.wait_for(timeout=10_000)
        await page.wait_for_function(
            "document.getElementById('token-problem').textContent.length > 0"
        )
        assert await page.evaluate("sessionStorage.getItem('jetdbt.token')") == "jdbt_not_a_token"
        assert await page.evaluate("document.cookie") == ""
        assert "jdbt_not_a_token" not in page.url
        await chromium.close()

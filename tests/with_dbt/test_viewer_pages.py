"""The viewer's daily pages in Debian's headless Chromium against one real stack: a run's
page on a 1400x900 screen (its graph above the fold, a node's panel that wraps), a model's
history across runs (reached from a node's panel and a relation's page), a project's
webhooks with each delivery and why it failed, and its jobs with their schedules, last runs
and the run now / pause / resume buttons a role may use.

One deploy and three dbt runs of a model that fails when asked (`--vars {fail: true}`) make
the history, the deliveries and a job's runs. Screenshots go to tests/artifacts/
(`pages-*.png`, ignored by git).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil

import aiohttp
import pytest
import pytest_asyncio
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import JobCommand, JobRun, JobSpec, ModelsCommand, RunCommand
from jetdbt.shared.identity import principals
from playwright.async_api import Error as PlaywrightError

from tests.support.helpers import auth_headers, closed_port, deploy_and_wait, get_json, wait_for
from tests.support.hook_receiver import Receiver
from tests.support.paths import EXAMPLE
from tests.support.shared_stack import shared_stack
from tests.support.viewer import ARTIFACTS, browser, sign_in

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

PROJECT = "jaffle_shop"
FLAKY = "model.jaffle_shop.flaky"
# A model that fails when asked, with a column name longer than a panel is wide.
LONG_COLUMN = "amount_refunded_to_the_customer_after_the_second_partial_return_in_cents"
FLAKY_SQL = (
    f"select 1 as id, 0 as {LONG_COLUMN}\n"
    "{% if var('fail', false) %} from a_table_nobody_made {% endif %}\n"
)
FLAKY_YML = (
    "models:\n  - name: flaky\n    description: A model that fails when the run asks it to.\n"
    f"    columns:\n      - name: id\n      - name: {LONG_COLUMN}\n"
)
SCREEN = {"width": 1400, "height": 900}
READY = "body[data-ready='1']"


async def _post(stack, path: str, body: dict) -> tuple[int, dict]:
    url = f"{stack.api_url}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=auth_headers(url)) as resp,
    ):
        return resp.status, await resp.json()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(tmp_path_factory, pg_url, environments_cache):
    """The example with `flaky` deployed; a job `nightly` (run flaky) scheduled and one
    `adhoc` without a schedule; three webhooks (a receiver answering 200, one answering 500,
    a closed port); then flaky run, failed, and run by its job. Yields the stack, the runs
    by name, an admin and a viewer bearer, and the hooks' secrets."""
    folder = tmp_path_factory.mktemp("pages")
    receivers = [Receiver(200), Receiver(500)]
    urls = [await r.start() for r in receivers]
    hosts = {
        "JETDBT_WEBHOOK_HOSTS": "127.0.0.1",
        "JETDBT_WEBHOOK_ATTEMPTS": "2",
        "JETDBT_WEBHOOK_RETRY_SECONDS": "0.2",
    }
    async with shared_stack(folder, pg_url, environments_cache, hosts) as stack:
        project = folder / PROJECT
        shutil.copytree(EXAMPLE, project)
        (project / "models" / "flaky.sql").write_text(FLAKY_SQL)
        (project / "models" / "flaky.yml").write_text(FLAKY_YML)
        await deploy_and_wait(stack.bus, project, PROJECT)
        flaky = ModelsCommand(select=["flaky"])
        for name, spec in (("nightly", JobSpec(command=flaky)), ("adhoc", JobSpec())):
            saved = await client.job(
                stack.bus, PROJECT, JobCommand(action="save", name=name, job=spec)
            )
            assert isinstance(saved, ev.JobSaved), saved
        daily = JobCommand(action="schedule", name="nightly", cron="0 0 6 * * *", tz="Europe/Paris")
        assert isinstance(await client.job(stack.bus, PROJECT, daily), ev.ScheduleSaved)
        closed = f"http://127.0.0.1:{closed_port()}/hook"
        secrets = []
        for name, url, on in (("pager", urls[0], ["end"]), ("refusing", urls[1], ["failure"]),
                              ("gone", closed, ["failure"])):  # fmt: skip
            status, answer = await _post(
                stack, f"/v1/projects/{PROJECT}/hooks",
                {"action": "add", "name": name, "url": url, "on": on},
            )  # fmt: skip
            assert status == 201, answer
            secrets.append(answer["secret"])
        runs = {}
        for name, command in (
            ("passed", RunCommand(command=flaky)),
            ("failed", RunCommand(command=ModelsCommand(select=["flaky"], vars={"fail": True}))),
            ("job", RunCommand(command=JobRun(name="nightly"))),
        ):
            done = await client.run(stack.bus, PROJECT, command)
            assert done.result.status == ("failed" if name == "failed" else "passed"), done.result
            runs[name] = done.run_id
        _, admin = await principals.create_token(
            stack.bus, principal="pages", team="default", role="admin"
        )
        _, viewer = await principals.create_token(
            stack.bus, principal="looker", team="default", role="viewer"
        )
        yield stack, runs, admin, viewer, secrets
    for r in receivers:
        await r.runner.cleanup()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium():
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    async with async_playwright() as pw:
        launched = await browser(pw)
        yield launched
        await launched.close()


async def _open(chromium, stack, bearer: str, hash_: str):
    """A signed-in tab on `hash_` at 1400x900, drawn; the page errors it collects."""
    page = await chromium.new_page(viewport=SCREEN, bypass_csp=True)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await sign_in(page, stack.api_url, bearer)
    await page.evaluate(f"location.hash = {hash_!r}")
    await page.wait_for_selector(READY, state="attached", timeout=30_000)
    return page, errors


async def _shot(page, name: str, full: bool = True) -> None:
    await page.screenshot(path=ARTIFACTS / name, full_page=full)


async def test_a_run_page_fits_a_1400_by_900_screen(scene, chromium):
    """The failed run (its header, its failure, the focus form, the legend): every node of
    its small graph is drawn above the fold, and the node panel wraps a long column name
    and SQL instead of running past its right edge."""
    stack, runs, admin, *_ = scene
    page, errors = await _open(chromium, stack, admin, f"#/runs/{runs['failed']}")
    graph = await page.evaluate("document.getElementById('graph').getBoundingClientRect().top")
    assert graph < SCREEN["height"] * 0.55, graph
    drawn = await page.evaluate("viewer.cy.nodes().map((n) => [n.id(), viewer.position(n.id()).y])")
    assert len(drawn) >= 8 and FLAKY in dict(drawn)
    assert [n for n in drawn if not 0 < n[1] < SCREEN["height"]] == [], drawn
    await page.evaluate(f"viewer.select({FLAKY!r})")
    await page.locator("#panel #compiled-sql").wait_for(timeout=10_000)
    assert LONG_COLUMN in await page.inner_text("#node-columns")
    wide, shown = await page.locator("#panel").evaluate("(p) => [p.scrollWidth, p.clientWidth]")
    assert wide <= shown, f"the panel is {wide} px wide inside {shown} px: something runs past it"
    await _shot(page, "pages-run-1400x900.png", full=False)
    assert errors == []


async def test_a_model_history_is_drawn_and_reached_from_a_node_panel_and_a_relation(
    scene, chromium
):
    """flaky's history: a point per run it was in, coloured by how it ended and as high as
    it took, with the runs listed; the run page's panel and the relation page link to it."""
    stack, runs, admin, *_ = scene
    page, errors = await _open(chromium, stack, admin, f"#/runs/{runs['failed']}")
    await page.evaluate(f"viewer.select({FLAKY!r})")
    await page.click("#node-history-link a", timeout=10_000)
    await page.wait_for_function("location.hash.includes('/nodes/')", timeout=10_000)
    await page.wait_for_selector("#duration-chart", timeout=10_000)
    _, body = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/nodes/{FLAKY}/history")
    history = {r["run_id"]: r for r in body["history"]}
    assert set(history) == set(runs.values())
    points = await page.evaluate(
        "[...document.querySelectorAll('#duration-chart .history-point')]"
        ".map((c) => [c.dataset.run, c.dataset.outcome, Number(c.getAttribute('cy'))])"
    )
    assert {run: outcome for run, outcome, _ in points} == {
        run: r["outcome"] for run, r in history.items()
    }
    assert {run: outcome for run, outcome, _ in points}[runs["failed"]] == "failed"
    # The longer a run took, the higher its point (a smaller y).
    by_time = sorted(points, key=lambda p: history[p[0]]["execution_time"])
    assert [p[2] for p in by_time] == sorted((p[2] for p in points), reverse=True)
    summary = await page.inner_text("#node-summary")
    assert "3 runs" in summary and "failed 1" in summary and "passed 2" in summary, summary
    assert await page.locator("#node-runs tr").count() == 1 + len(history)
    await _shot(page, "pages-model-history.png")

    relation = "dbt://main/jaffle_shop/flaky"
    await page.evaluate(f"location.hash = '#/relations/' + encodeURIComponent({relation!r})")
    await page.click(f"a[href*='/nodes/{FLAKY}']", timeout=10_000)
    await page.wait_for_selector("#duration-chart", timeout=10_000)
    assert FLAKY in await page.evaluate("decodeURIComponent(location.hash)")
    assert errors == []


async def test_the_webhooks_page_shows_each_delivery_and_why_it_failed(scene, chromium):
    stack, runs, admin, _, secrets = scene

    async def given_up():
        dead = []
        for hook in ("refusing", "gone"):
            url = f"{stack.api_url}/v1/projects/{PROJECT}/hooks/{hook}/deliveries?state=dead"
            dead += (await get_json(url))[1]["deliveries"]
        return len(dead) == 2

    await wait_for(given_up, timeout=60)
    page, errors = await _open(chromium, stack, admin, f"#/projects/{PROJECT}/hooks")
    for hook, why in (("refusing", "answered 500"), ("gone", "no HTTP answer")):
        section = page.locator(f"#hook-{hook}")
        assert await section.locator("tr[data-state='dead']").count() == 1
        assert await section.locator("tr[data-state='retrying']").count() == 1
        assert why in await section.inner_text()
        assert await page.inner_text(f"#hook-{hook}-states") == "1 delivery: dead 1"
    _, pager = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/hooks/pager/deliveries")
    assert len(pager["deliveries"]) == 3 and {d["state"] for d in pager["deliveries"]} == {
        "delivered"
    }
    assert await page.locator("#hook-pager tr[data-state='delivered']").count() == 3
    assert runs["failed"] in await page.inner_text("#hook-pager")
    content = await page.content()
    assert not [s for s in secrets if s in content], "a hook's secret reached the page"
    await _shot(page, "pages-webhooks.png")
    assert errors == []


async def test_the_jobs_page_runs_pauses_and_resumes_a_job_for_the_roles_allowed(scene, chromium):
    stack, runs, admin, viewer, _ = scene
    page, errors = await _open(chromium, stack, viewer, f"#/projects/{PROJECT}/jobs")
    buttons = await page.evaluate(
        "[...document.querySelectorAll('#jobs button')].map((b) => [b.id, b.disabled, b.title])"
    )
    assert sorted(b[0] for b in buttons) == ["pause-nightly", "run-now-adhoc", "run-now-nightly"]
    assert all(disabled and "needs role runner" in title for _, disabled, title in buttons)
    await _shot(page, "pages-jobs-viewer.png")

    page, errors = await _open(chromium, stack, admin, f"#/projects/{PROJECT}/jobs")
    nightly, adhoc = page.locator("tr[data-job='nightly']"), page.locator("tr[data-job='adhoc']")
    said = await nightly.inner_text()
    assert "run --select flaky" in said and "0 0 6 * * *" in said and "Europe/Paris" in said
    # Its last runs are its own: the project's other runs are no job's.
    chips = await nightly.locator("a.run-chip").evaluate_all("(a) => a.map((x) => x.hash)")
    assert chips == [f"#/runs/{runs['job']}"]
    assert "never run" in await adhoc.inner_text()

    async def state():
        _, body = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/jobs")
        return {j["name"]: (j["schedule"] or {}).get("state") for j in body["jobs"]}["nightly"]

    await nightly.locator("#pause-nightly").click()
    await page.wait_for_selector("tr[data-job='nightly'] .pill.paused", timeout=15_000)
    assert await state() == "paused"
    assert "paused" in await nightly.inner_text()
    await _shot(page, "pages-jobs.png")
    await page.click("#resume-nightly")
    await page.wait_for_selector("tr[data-job='nightly'] .pill.active", timeout=15_000)
    assert await state() == "active"

    await page.click("#run-now-nightly")
    await page.wait_for_function("location.hash.startsWith('#/runs/')", timeout=10_000)
    run_id = (await page.evaluate("location.hash")).removeprefix("#/runs/")
    await page.wait_for_selector("body[data-run-ended='1']", state="attached", timeout=180_000)
    _, run = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
    assert (run["status"], run["job"], run["trigger"]) == ("passed", "nightly", "api"), run
    assert errors == []


def _slowly(answered: asyncio.Event):
    """A route handler that lets the request through 2 s late, then says it answered."""

    async def handle(route):
        await asyncio.sleep(2)
        with contextlib.suppress(PlaywrightError):  # the tab gave the request up
            await route.continue_()
        answered.set()

    return handle


async def test_a_slow_answer_to_the_page_left_never_replaces_the_page_the_tab_is_on(
    scene, chromium
):
    """A person who goes on before a page's answer came stays where they went: signing in
    draws the projects list, and a project's jobs asked for before it answers stay drawn;
    the jobs page, waiting on who the token is, never comes back over the list either."""
    stack, _, admin, *_ = scene
    jobs = f"#/projects/{PROJECT}/jobs"
    for slow, went, then, stays, title in (
        ("**/v1/projects?limit=*", None, jobs, "#jobs", f"{PROJECT} jobs · jetdbt"),
        ("**/v1/whoami", jobs, "#/", "#projects", "projects · jetdbt"),
    ):
        page = await chromium.new_page(viewport=SCREEN, bypass_csp=True)
        errors: list[str] = []
        page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        answered = asyncio.Event()
        await page.route(slow, _slowly(answered))
        await sign_in(page, stack.api_url, admin)
        if went:
            await page.wait_for_selector("#projects", timeout=30_000)  # sign-in's page
            await page.evaluate(f"location.hash = {went!r}")
            await page.wait_for_timeout(300)  # the jobs page is waiting for its answer
        await page.evaluate(f"location.hash = {then!r}")
        await page.wait_for_selector(stays, timeout=30_000)
        await asyncio.wait_for(answered.wait(), 10)
        await page.wait_for_timeout(500)  # the late answer, had it been drawn, would be by now
        assert await page.title() == title, (slow, await page.title())
        assert await page.locator(stays).count() == 1
        assert await page.locator("#problem").count() == 0
        assert errors == []
        await page.close()

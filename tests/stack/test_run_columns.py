"""The columns people scan, without dbt: each run's command, job, trigger and environment in
the API's runs list, `jetdbt status --project` and the viewer's runs table; a project whose
only deploy failed reads as failed, with dbt's reason, in the API's project list, `jetdbt
projects` and the viewer (never as an empty row). Screenshots go to tests/artifacts/."""

from __future__ import annotations

from jetdbt.shared.bus import events as ev
from jetdbt.shared.identity import principals

from tests.support.helpers import get_json, jetdbt, wait_for
from tests.support.viewer import ARTIFACTS, browser, sign_in

FAILED, RUNS = "never_parsed", "columns_seen"
REASON = "dbt parse failed: Compilation Error in model broken (models/broken.sql)\n  unexpected '}'"
# run id: (command, job, trigger, environment)
SEEN = {
    "c-seed": ({"label": "seed"}, "", "manual", "prod"),
    "c-show": ({"label": "show", "select": ["orders"], "limit": 3}, "", "api", "prod"),
    "c-job": ({"label": "job", "name": "nightly"}, "nightly", "schedule", "staging"),
}


async def _publish(stack) -> None:
    digest = f"sha256:{1:064x}"
    await stack.bus.publish(
        ev.DeployRequested(project=FAILED, deploy_id="d1", bundle_digest=digest, bundle_size=1)
    )
    await stack.bus.publish(
        ev.DeployFailed(project=FAILED, deploy_id="d1", version=digest, reason=REASON)
    )
    for run_id, (command, job, trigger, environment) in SEEN.items():
        await stack.bus.publish(
            ev.RunRequested(
                project=RUNS, run_id=run_id, command=command, job=job, trigger=trigger,
                environment=environment,
            )
        )  # fmt: skip


async def test_runs_show_command_job_trigger_and_environment_and_a_failed_deploy_its_reason(
    stack,
):
    await _publish(stack)

    async def runs():
        _, body = await get_json(f"{stack.api_url}/v1/projects/{RUNS}/runs")
        return body if len(body.get("runs", [])) == len(SEEN) else None

    async def projects():
        _, body = await get_json(f"{stack.api_url}/v1/projects")
        listed = {p["project"]: p for p in body.get("projects", [])}
        return listed.get(FAILED) if listed.get(FAILED, {}).get("last_deploy_status") else None

    listed = await wait_for(runs)
    failed = await wait_for(projects)
    assert {
        r["run_id"]: (r["command"], r["job"], r["trigger"], r["environment"])
        for r in listed["runs"]
    } == SEEN
    assert (failed["version"], failed["deployed_at"]) == (None, None)
    assert failed["last_deploy_status"] == "failed" and failed["last_deploy_reason"] == REASON
    assert failed["last_deploy_id"] == "d1" and failed["last_deploy_at"]

    status = await jetdbt(stack, "status", "--project", RUNS)
    assert status.returncode == 0, status.stderr
    head, *rows = status.stdout.splitlines()
    assert head.split()[:8] == [
        "run",
        "id",
        "status",
        "env",
        "command",
        "job",
        "trigger",
        "requested",
    ]
    by_id = {row.split()[0]: row.split()[1:] for row in rows}  # an empty job is no word
    assert by_id["c-job"][:5] == ["requested", "staging", "job", "nightly", "schedule"]
    assert by_id["c-seed"][:4] == ["requested", "prod", "seed", "manual"]
    assert by_id["c-show"][:4] == ["requested", "prod", "show", "api"]

    printed = await jetdbt(stack, "projects")
    assert printed.returncode == 0, printed.stderr
    row = next(line for line in printed.stdout.splitlines() if line.startswith(FAILED))
    assert row.split() == [FAILED, "-", "failed"]
    assert (
        f"{FAILED}: deploy d1 failed: dbt parse failed: Compilation Error in model broken"
        " (models/broken.sql)"
    ) in printed.stdout.splitlines()

    await _viewer(stack)


async def _viewer(stack) -> None:
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    _, bearer = await principals.create_token(stack.bus, principal="ann", team="ops", role="admin")
    async with async_playwright() as pw:
        chromium = await browser(pw)
        page = await chromium.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await sign_in(page, stack.api_url, bearer)
        await page.wait_for_selector("#projects", timeout=30_000)
        cells = await page.locator("#projects tr", has_text=FAILED).locator("td").all_inner_texts()
        await page.screenshot(path=ARTIFACTS / "columns-projects.png", full_page=True)
        await page.evaluate(f"location.hash = '#/projects/{RUNS}'")
        await page.wait_for_selector("#runs", timeout=30_000)
        head = await page.locator("#runs th").all_inner_texts()
        rows = {
            (texts := await row.locator("td").all_inner_texts())[0]: texts
            for row in await page.locator("#runs tr", has=page.locator("td")).all()
        }
        await page.screenshot(path=ARTIFACTS / "columns-runs.png", full_page=True)
        await chromium.close()
    assert errors == []
    assert cells[1] == "none" and cells[3].startswith("failed")
    assert REASON.splitlines()[0] in cells[3] and "unexpected '}'" in cells[3]
    assert head[:6] == ["run", "status", "environment", "command", "job", "trigger"]
    assert rows["c-job"][2:6] == ["staging", "job", "nightly", "schedule"]
    assert rows["c-show"][2:6] == ["prod", "show", "", "api"]
    assert rows["c-seed"][2:6] == ["prod", "seed", "", "manual"]

"""The run viewer in headless Chromium: a signed-in page, a run's page, a deploy with a gate
model, for the viewer's browser tests."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from jetdbt.services.cli import client
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.identity import principals

from tests.support.gate import add_gate
from tests.support.helpers import deploy_and_wait

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


BROKEN = "model.jaffle_shop.broken"


async def browser(playwright):
    """Headless Chromium from the system (`.ci/run` installs Debian's package)."""
    return await playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
    )


async def sign_in(page, api_url: str, bearer: str) -> None:
    """The viewer asks for a token once and keeps it for the tab."""
    await page.goto(f"{api_url}/ui/")
    await page.fill("#token-input", bearer)
    await page.click("#token-form button[type=submit]")


async def run_page(chromium, stack, bearer: str, run_id: str):
    """A signed-in tab on a run's page, and the page errors it collects."""
    page = await chromium.new_page(viewport={"width": 1600, "height": 1000}, bypass_csp=True)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await sign_in(page, stack.api_url, bearer)
    await page.evaluate(f"location.hash = '#/runs/{run_id}'")
    return page, errors


async def go_to(page, where: str) -> None:
    """Show `where` (a JavaScript expression of the hash) and wait until its page is drawn:
    the page left behind said it was ready too, so that is cleared first (the router, run
    on the hashchange event, clears it only a moment later)."""
    await page.evaluate(f"delete document.body.dataset.ready; location.hash = {where}")
    await page.wait_for_selector("body[data-ready='1']", state="attached", timeout=30_000)


async def deployed_with_gate(stack, project, release) -> str:
    """The example, gated, deployed; an admin bearer for the viewer."""
    add_gate(project, release)
    await deploy_and_wait(stack.bus, project, "jaffle_shop")
    _, bearer = await principals.create_token(
        stack.bus, principal="viewer-test", team="ops", role="admin"
    )
    return bearer


def build_in_background(stack, run_id: str) -> asyncio.Task:
    return asyncio.create_task(
        client.run(stack.bus, "jaffle_shop", RunCommand(command=BuildCommand(), run_id=run_id))
    )


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

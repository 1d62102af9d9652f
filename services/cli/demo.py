"""`make demo`: the embedded stack, the example project deployed and built live, the API shown."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiohttp
import msgspec
from jetdbt.projections.progress.queries import run_summary
from jetdbt.services.access.local import admin_token_file
from jetdbt.services.cli import client
from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.watch import Progress, Tally, result_table
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.process.config import Settings
from jetdbt.shared.project import slot_versions
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs import planned, run_status
from jetdbt.shared.runs.viewer_links import viewer_url

__all__ = ["demo", "EXAMPLE"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jaffle_shop"


def _step(text: str) -> None:
    print(f"\n== {text}")


def _trim(body, limit: int = 12) -> str:
    lines = json.dumps(body, indent=2, default=str).splitlines()
    more = len(lines) - limit
    cut = [f"  ... ({counted(more, 'more line')})"] if more > 0 else []
    return "\n".join(lines[:limit] + cut)


async def _show(session: aiohttp.ClientSession, api: str, path: str) -> None:
    async with session.get(api + path) as resp:
        body = await resp.json()
    auth = "" if path == "/healthz" else '-H "Authorization: Bearer $JETDBT_TOKEN" '
    print(f"$ curl {auth}{api}{path}\n{_trim(body)}")


async def demo(settings: Settings) -> int:
    up_api = f"http://{settings.api_host}:{settings.api_port}"  # where `jetdbt up` serves
    settings = msgspec.structs.replace(settings, api_port=0)
    where = "the configured servers" if settings.nats_url else f"{settings.home} (embedded)"
    _step(f"starting the stack on {where}")
    stack = await Stack(settings).start()
    try:
        print(f"NATS {stack.nats_url}  API {stack.api_url}")
        _step(f"deploying {EXAMPLE.name}")
        packed, deployed = await client.deploy(stack.bus, EXAMPLE, "jaffle_shop")
        if isinstance(deployed, ev.DeployUnchanged):
            print(f"unchanged: version {deployed.version[:19]} is deployed already")
        elif isinstance(deployed, ev.Deployed):
            print(
                f"deployed version {deployed.version[:19]}: {counted(len(deployed.files), 'file')},"
                f" {deployed.engine} {deployed.engine_version} on {deployed.adapter}"
            )
        else:
            print(f"deploy did not succeed: {deployed}")
            return 1
        latest = await slot_versions.held_by(stack.bus, deployed.project, DEFAULT_ENVIRONMENT)
        _step("building with live per-model progress (one dbt build, events as they happen)")
        manifest = await stack.bus.get_blob(latest.manifest_digest)
        progress = Progress(Tally(len(planned.nodes(manifest))))
        final = await client.run(
            stack.bus, "jaffle_shop", RunCommand(command=BuildCommand()), on_event=progress.on_event
        )
        progress.stop()
        if not isinstance(final, ev.RunFinished):
            print(f"run refused: {final.reason}")
            return 1
        _step("result (the warn-severity test fails by design and does not fail the run)")
        print(result_table(final.result))
        _step("the query API, as projected from the event log")
        await _wait_projected(stack, final.run_id)
        auth = {"Authorization": f"Bearer {stack.admin_token}"} if stack.admin_token else {}
        print(f"(JETDBT_TOKEN: the admin token in {admin_token_file(settings.home)})")
        async with aiohttp.ClientSession(headers=auth) as session:
            await _show(session, stack.api_url, "/healthz")
            await _show(session, stack.api_url, "/v1/projects/jaffle_shop/runs?limit=2")
            await _show(session, stack.api_url, f"/v1/runs/{final.run_id}")
        _step("done")
        print(
            "keep the stack running with `.venv/bin/jetdbt up`; then, in another terminal:\n"
            f"  .venv/bin/jetdbt deploy {os.path.relpath(EXAMPLE)}\n"
            "  .venv/bin/jetdbt run jaffle_shop --watch\n"
            "  .venv/bin/jetdbt status --project jaffle_shop"
        )
        # The home keeps the run, so the viewer shows it once `jetdbt up` serves this home.
        print(f"run viewer (with `jetdbt up`): {viewer_url(up_api, final.run_id)}")
        return 0 if final.result.status == run_status.PASSED else 1
    finally:
        await stack.stop()


async def _wait_projected(stack: Stack, run_id: str) -> None:
    """The API reads projections, which trail the log by a moment."""
    for _ in range(100):
        run = await run_summary(stack.pool, run_id)
        if run is not None and run.status in (run_status.PASSED, run_status.FAILED):
            return
        await asyncio.sleep(0.1)

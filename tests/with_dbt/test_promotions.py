"""A deploy is not a promotion, against real dbt: a version deployed with --no-promote runs
nowhere (production keeps building the one before, seen in the warehouse), `jetdbt promote`
moves production to it and back, each move an event the API and the CLI show with who and
from which version to which."""

from __future__ import annotations

import json

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.project import slot_versions

from tests.support.helpers import duckdb_tables, get_json, jetdbt, wait_for

pytestmark = pytest.mark.dbt

PROJECT = "jaffle_shop"
MARKER = "promoted_marker"  # a model only the second version has


async def _latest(stack) -> str:
    return (await stack.bus.last_event(subjects.deploy_event(PROJECT, "deployed"))).version


async def _build_marker(stack) -> ev.Event:
    """A production build of the marker model alone (refused in a version without it)."""
    return await client.run(stack.bus, PROJECT, RunCommand(command=BuildCommand(select=[MARKER])))


async def test_deploy_without_promoting_then_promote_and_roll_back(stack, project_copy):
    first = await jetdbt(stack, "deploy", str(project_copy))
    assert first.returncode == 0, first.stderr
    v1 = await _latest(stack)
    assert f"prod: (nothing) → {v1[:19]}" in first.stdout

    (project_copy / "models" / f"{MARKER}.sql").write_text("select 2 as promoted\n")
    second = await jetdbt(stack, "deploy", str(project_copy), "--no-promote")
    assert second.returncode == 0, second.stderr
    v2 = await _latest(stack)
    assert v2 != v1 and "promoted nowhere" in second.stdout
    assert (await slot_versions.held_by(stack.bus, PROJECT, "prod")).version == v1
    refused = await _build_marker(stack)
    assert isinstance(refused, ev.RunRefused) and "matches no nodes" in refused.reason

    moved = await jetdbt(stack, "promote", PROJECT, v2[7:19])
    assert moved.returncode == 0, moved.stderr
    assert f"prod: {v1[:19]} → {v2[:19]}" in moved.stdout
    built = await _build_marker(stack)
    assert isinstance(built, ev.RunFinished) and built.result.status == "passed", built
    assert MARKER in duckdb_tables(stack.settings.default_duckdb)

    back = await jetdbt(stack, "promote", PROJECT, v1, "--env", "prod", "--json")
    assert back.returncode == 0, back.stderr
    event = json.loads(back.stdout)
    assert event["type"] == "deploy.promoted.v1" and (event["previous"], event["version"]) == (
        v2,
        v1,
    )

    async def history():
        _, body = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/promotions")
        rows = body.get("promotions") or []
        return rows if len(rows) == 3 else None

    rows = await wait_for(history)
    assert [(r["previous"], r["version"]) for r in rows] == [(v2, v1), (v1, v2), ("", v1)]
    assert all(r["promoted_by"] and r["slot"] == "prod" for r in rows)
    assert rows[2]["deploy_id"] and not rows[0]["deploy_id"]  # a deploy's, then commands'
    shown = await jetdbt(stack, "environments", PROJECT)
    assert shown.returncode == 0 and f"prod         {v1[:19]}  {v2[:19]}" in shown.stdout

    staging = await jetdbt(stack, "promote", PROJECT, v2, "--env", "staging")
    assert staging.returncode == 3 and "no environment 'staging'" in staging.stderr
    # The folder deployed again, its version deployed already: no parse, a promotion; into
    # the deployer's own dev environment alone, then into production.
    mine = await jetdbt(stack, "deploy", str(project_copy), "--env", "dev")
    assert mine.returncode == 0 and "is deployed already" in mine.stdout, mine.stderr
    assert "runs it already" not in mine.stdout  # it was promoted, not left
    dev = next(line for line in mine.stdout.splitlines() if line.startswith("dev/"))
    assert dev.endswith(f"{v1[:19]} → {v2[:19]} (by {dev.split(':')[0][4:]})"), dev
    assert (await slot_versions.held_by(stack.bus, PROJECT, "prod")).version == v1
    again = await jetdbt(stack, "deploy", str(project_copy))
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stderr
    assert f"prod: {v1[:19]} → {v2[:19]}" in again.stdout and await _latest(stack) == v2

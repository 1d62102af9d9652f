"""Promotions on a log written before environments, no dbt: a project's old deploys (each made
itself current) fold as promotions into the default environment, and the promote verb moves
slots among them, refusing what is wrong by name. Versions are published as a runner
published them then, so two can share a long prefix on purpose."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from jetdbt.projections.replay import replay
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import PromoteCommand
from jetdbt.shared.identity import principals
from jetdbt.shared.project import slot_versions

from tests.support.helpers import get_json, jetdbt, wait_for

pytestmark = pytest.mark.asyncio

PROJECT = "old_shop"
_NOT_A_VERSION = "is not a version: give a version's digest"
OLD = "sha256:abcdef0123451" + "0" * 51
NEWER = "sha256:abcdef0123452" + "0" * 51


def _deployed(version: str, deploy_id: str, seq: int) -> ev.Deployed:
    """A Deployed event as a runner wrote it before environments (current by default)."""
    return ev.Deployed(
        project=PROJECT,
        deploy_id=deploy_id,
        version=version,
        bundle_size=100,
        manifest_size=100,
        manifest_digest="sha256:" + "1" * 64,
        engine="dbt-core-1x",
        engine_version="1.10",
        adapter="duckdb",
        adapter_version="1.10",
        files=["dbt_project.yml"],
        requested_by="ann",
        command_seq=seq,
    )


async def _promote(stack, version: str, environment: str = "") -> ev.Event:
    command = PromoteCommand(version=version, environment=environment, requested_by="ops")
    return await client.promote(stack.bus, PROJECT, command)


async def _answer(stack, route: str, rows: int) -> list[dict]:
    async def listed():
        _, body = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/{route}")
        found = body.get(route) or []
        return found if len(found) == rows else None

    return await wait_for(listed)


async def test_old_deploys_fold_as_prod_and_the_promote_verb_moves_and_refuses(stack):
    for n, version in enumerate((OLD, NEWER), start=1):
        await stack.bus.publish(_deployed(version, f"d{n}", n))
    history = await _answer(stack, "promotions", 2)
    assert [(p["slot"], p["version"], p["previous"]) for p in history] == [
        ("prod", NEWER, OLD),
        ("prod", OLD, ""),
    ]
    assert history[0]["deploy_id"] == "d2" and history[0]["promoted_by"] == "ann"

    ambiguous = await _promote(stack, "sha256:abcdef012345")
    assert isinstance(ambiguous, ev.DeployRefused)
    assert "names 2 deployed versions" in ambiguous.reason, ambiguous.reason
    assert OLD[:23] in ambiguous.reason and NEWER[:23] in ambiguous.reason, ambiguous.reason
    unknown = await _promote(stack, "0123456789ab")
    assert isinstance(unknown, ev.DeployRefused)
    assert "no deployed version '0123456789ab'" in unknown.reason and NEWER[:19] in unknown.reason
    staging = await _promote(stack, OLD, "staging")
    assert isinstance(staging, ev.DeployRefused)
    assert "no environment 'staging'" in staging.reason and "dev, prod" in staging.reason

    # Into a person's own dev first: the default environment's old version is carried over as
    # an event (it would otherwise run nothing), which changes nothing the fold shows.
    dev = await _promote(stack, OLD, "dev")
    assert isinstance(dev, ev.Promoted) and dev.slot() == "dev/ops" and dev.previous == NEWER
    assert (await slot_versions.promotion_of(stack.bus, PROJECT, "prod")).version == NEWER
    assert (await slot_versions.held_by(stack.bus, PROJECT, "prod")).version == NEWER

    back = await _promote(stack, OLD[7:20])
    assert isinstance(back, ev.Promoted) and (back.previous, back.version) == (NEWER, OLD)
    assert back.requested_by == "ops" and back.deploy_id == ""
    assert (await slot_versions.held_by(stack.bus, PROJECT, "prod")).version == OLD
    again = await _promote(stack, OLD)
    assert isinstance(again, ev.DeployUnchanged) and again.version == OLD

    await _answer(stack, "promotions", 4)  # folded up to the last promotion: `back`
    now = {v["slot"]: v["version"] for v in await _answer(stack, "versions", 2)}
    assert now == {"prod": OLD, "dev/ops": OLD}
    _, prod = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/promotions?environment=prod")
    assert [p["version"] for p in prod["promotions"]] == [OLD, NEWER, OLD]
    report = await replay(stack.bus, stack.database_url, stack.settings.schema, ["promotions"])
    assert report.differences == 0 and report.tables


async def test_a_runner_token_cannot_promote_and_a_bad_body_is_named(stack):
    _, runner = await principals.create_token(
        stack.bus, principal="rita", team="ops", role="runner"
    )
    _, deployer = await principals.create_token(
        stack.bus, principal="dana", team="ops", role="deployer"
    )
    owned = ev.DeployRequested(  # the project is team ops's: its deployer's team
        project=PROJECT, deploy_id="d0", bundle_digest=OLD, bundle_size=1, team="ops"
    )
    await stack.bus.publish(owned)

    async def owned_folded():  # the API reads a project's team from the deploys projection
        _, body = await get_json(f"{stack.api_url}/v1/projects/{PROJECT}/deploys")
        return any(d["deploy_id"] == "d0" for d in body.get("deploys", []))

    await wait_for(owned_folded)
    url = f"{stack.api_url}/v1/projects/{PROJECT}/promotions"
    body = {"version": OLD, "environment": "prod"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers={"Authorization": f"Bearer {runner}"}) as r:
            assert r.status == 403 and "needs role 'deployer'" in (await r.json())["error"]
        bad = {"version": OLD, "environment": "Prod!"}
        async with http.post(url, json=bad, headers={"Authorization": f"Bearer {deployer}"}) as r:
            assert r.status == 400 and "environment name" in (await r.json())["error"]
        short = {"version": "0000", "environment": "prod"}
        async with http.post(url, json=short, headers={"Authorization": f"Bearer {deployer}"}) as r:
            said = (await r.json())["error"]
            assert r.status == 400 and _NOT_A_VERSION in said and "Expected" not in said, said
        async with http.post(url, json=body, headers={"Authorization": f"Bearer {deployer}"}) as r:
            accepted = await r.json()
            assert r.status == 202 and accepted["command_id"].startswith("c"), accepted


async def test_promote_names_a_version_argument_that_is_not_one(stack):
    """A version too short or not hex is refused by the CLI before anything is sent, saying
    what a version looks like, with the usage code (2) as any argument it cannot use."""
    for bad in ("0000", "prod"):
        said = await jetdbt(stack, "promote", PROJECT, bad, "--env", "prod")
        assert said.returncode == 2, said
        assert said.stderr.startswith(f"jetdbt: version '{bad}' {_NOT_A_VERSION}"), said.stderr
        assert "sha256:" in said.stderr and "Expected" not in said.stderr, said.stderr


async def test_two_promotions_at_once_each_name_what_the_slot_ran_before(stack):
    """Promotions of one slot racing each other: the one that lands second reads the slot again,
    so each `previous` is what the slot ran just before it, never a version it skipped."""
    versions_ = [f"sha256:{n:02d}" + "e" * 62 for n in range(1, 5)]
    for n, version in enumerate(versions_, start=1):
        await stack.bus.publish(_deployed(version, f"d{n}", n))
    moved = await asyncio.gather(*(_promote(stack, v) for v in versions_[:3]))
    # One landing after a later-submitted one is superseded: refused, naming why.
    for m in moved:
        assert isinstance(m, ev.Promoted | ev.DeployUnchanged) or m.reason.startswith(
            "superseded:"
        ), m
    landed = sum(isinstance(m, ev.Promoted) for m in moved)
    chain = await _answer(stack, "promotions", 4 + landed)
    for newer, older in zip(chain, chain[1:], strict=False):
        assert newer["previous"] == older["version"], chain

"""Operations from the outside: lag and dead letters over HTTP (JSON and Prometheus), and the
`status`, `dead-letters`, `replay` and `audit export` commands as a user runs them."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import aiohttp
import pyarrow.parquet as pq
from jetdbt.projections.deploys.fold import DeploysFold
from jetdbt.projections.migrate import quote_ident
from jetdbt.shared.bus import events as ev

from tests.support import synthetic
from tests.support.helpers import auth_headers, get_json, jetdbt, wait_for


async def metrics(stack) -> tuple[str, dict[str, float]]:
    url = f"{stack.api_url}/metrics"
    async with aiohttp.ClientSession(headers=auth_headers(url)) as session, session.get(url) as r:
        assert r.status == 200
        text = await r.text()
        kind = r.headers["Content-Type"]
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return kind, values


async def test_lag_and_dead_letters_are_served_and_retried_after_a_fix(stack):
    schema = quote_ident(stack.settings.schema)
    async with stack.pool.acquire() as conn:
        await conn.execute(
            f"ALTER TABLE {schema}.deploys ADD CONSTRAINT no_x CHECK (project <> 'x')"
        )
    published = await synthetic.publish(stack.bus, synthetic.log(4))
    poison = ev.DeployRequested(
        project="x", deploy_id="d1", bundle_digest="sha256:0", bundle_size=1
    )
    await stack.bus.publish(poison)
    await stack.bus.js.publish("dbt.evt.run.x.r1.requested", b"not json")

    async def settled():
        _, values = await metrics(stack)
        lags = [v for k, v in values.items() if k.startswith("jetdbt_projection_lag_events")]
        return values if lags and not any(lags) else None

    values = await wait_for(settled)
    kind, _ = await metrics(stack)
    assert kind.startswith("text/plain; version=0.0.4")
    last = published + 2
    assert values['jetdbt_stream_last_seq{stream="DBT_EVENTS"}'] == last
    assert values['jetdbt_projection_checkpoint{projection="progress"}'] == last
    assert values['jetdbt_projection_dead_letters{projection="progress"}'] == 1
    assert values['jetdbt_projection_dead_letters{projection="deploys"}'] == 1
    assert values['jetdbt_projection_dead_letters{projection="graph"}'] == 0
    # The four synthetic runs passed, each in 20 s, each of their 20 nodes in 0.25 s.
    assert values['jetdbt_runs_finished_total{project="synth",outcome="passed"}'] == 4
    assert values['jetdbt_run_duration_seconds_bucket{le="15"}'] == 0
    assert values['jetdbt_run_duration_seconds_bucket{le="30"}'] == 4
    assert values["jetdbt_run_duration_seconds_sum"] == 80
    assert values['jetdbt_node_duration_seconds_bucket{le="0.1"}'] == 0
    assert values['jetdbt_node_duration_seconds_bucket{le="0.5"}'] == 80
    assert values['jetdbt_node_duration_seconds_bucket{le="+Inf"}'] == 80
    assert values["jetdbt_node_duration_seconds_count"] == 80

    status = await jetdbt(stack, "status")
    assert status.returncode == 0, status.stderr
    assert f"stream DBT_EVENTS last sequence {last}" in status.stdout
    assert re.search(rf"^progress\s+{last}\s+0\s+1$", status.stdout, re.M), status.stdout
    assert re.search(r"^deploys\s+\d+\s+0\s+1$", status.stdout, re.M), status.stdout

    code, body = await get_json(f"{stack.api_url}/v1/dead-letters?projection=deploys")
    assert code == 200 and [d["subject"] for d in body["dead_letters"]] == [poison.subject()]
    listed = await jetdbt(stack, "dead-letters", "list")
    assert listed.returncode == 0 and "not json" in listed.stdout and "no_x" in listed.stdout

    async with stack.pool.acquire() as conn:
        await conn.execute(f"ALTER TABLE {schema}.deploys DROP CONSTRAINT no_x")
    retried = await jetdbt(stack, "dead-letters", "retry")
    assert retried.returncode == 1, retried.stderr  # the bytes that are not JSON never will be
    assert f"deploys #{published + 1}: applied" in retried.stdout
    assert "progress" in retried.stdout and "DecodeError" in retried.stdout
    assert "1 applied, 1 still failing" in retried.stdout
    async with stack.pool.acquire() as conn:
        assert await conn.fetchval("SELECT status FROM deploys WHERE project = 'x'") == "requested"
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 1
    _, values = await metrics(stack)
    assert values['jetdbt_projection_dead_letters{projection="deploys"}'] == 0


async def test_a_bug_in_a_fold_stops_its_projection_loudly_until_fixed(stack, monkeypatch):
    """A fold that raises TypeError on an event is a bug, not a bad event: its projection
    stops at that event (the one before it folded; no dead letter, no row after it), says
    so on /healthz, /v1/projections, /metrics and `jetdbt status`, while the other
    projections go on; once the fold is fixed it folds from where it stopped."""
    real = DeploysFold.apply

    async def planted(self, conn, event, seq):
        if isinstance(event, ev.DeployRequested) and event.project == "bug":
            raise TypeError("a planted bug")
        await real(self, conn, event, seq)

    monkeypatch.setattr(DeploysFold, "apply", planted)
    published = {}
    for project in ("before", "bug", "after"):
        published[project] = await stack.bus.publish(
            ev.DeployRequested(project=project, deploy_id=project, bundle_digest="sha256:0",
                               bundle_size=1)
        )  # fmt: skip
    await synthetic.publish(stack.bus, synthetic.log(1))

    async def stopped():
        _, body = await get_json(f"{stack.api_url}/v1/projections")
        by_name = {p["projection"]: p for p in body["projections"]}
        deploys, progress = by_name["deploys"], by_name["progress"]
        return deploys if deploys["stopped"] and progress["lag"] == 0 else None

    deploys = await wait_for(stopped)
    assert deploys["stopped"] == f"TypeError: a planted bug (at event {published['bug'].seq})"
    assert deploys["checkpoint"] == published["bug"].seq - 1, deploys
    assert deploys["lag"] >= 2 and deploys["dead_letters"] == 0, deploys
    status, health = await get_json(f"{stack.api_url}/healthz")
    assert status == 200 and health["ok"] is False and health["problems"] == [], health
    assert health["stopped"] == ["deploys"], health
    _, values = await metrics(stack)
    assert values['jetdbt_projection_stopped{projection="deploys"}'] == 1
    assert values['jetdbt_projection_stopped{projection="progress"}'] == 0
    said = await jetdbt(stack, "status")
    assert "deploys stopped: TypeError: a planted bug" in said.stdout, said.stdout
    async with stack.pool.acquire() as conn:
        assert await conn.fetchval("SELECT array_agg(project) FROM deploys") == ["before"]
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
        assert await conn.fetchval("SELECT count(*) FROM runs WHERE project = 'synth'") == 1

    monkeypatch.undo()  # the fix, deployed

    async def fixed():
        async with stack.pool.acquire() as conn:
            done = await conn.fetchval(
                "SELECT count(*) FROM deploys WHERE project IN ('before', 'bug', 'after')"
            )
        _, health = await get_json(f"{stack.api_url}/healthz")
        return health if done == 3 and health["ok"] else None

    assert (await wait_for(fixed))["stopped"] == []


async def test_replay_and_export_from_the_command_line(stack, tmp_path):
    first = await synthetic.publish(stack.bus, synthetic.log(3, project="a"))
    await asyncio.sleep(0.05)
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)
    second = await synthetic.publish(stack.bus, synthetic.log(2, project="b", start=3))

    async def settled():
        _, body = await get_json(f"{stack.api_url}/v1/projections")
        return all(p["lag"] == 0 for p in body["projections"])

    await wait_for(settled)
    replayed = await jetdbt(stack, "replay", "--all")
    assert replayed.returncode == 0, replayed.stderr
    assert "0 differences" in replayed.stdout
    assert re.search(r"^runs\s+5\s+5\s+0$", replayed.stdout, re.M), replayed.stdout
    one = await jetdbt(stack, "replay", "--projection", "deploys")
    assert one.returncode == 0 and "runs" not in one.stdout and "deploys" in one.stdout

    out = tmp_path / "b.parquet"
    done = await jetdbt(stack, "audit", "export", "--project", "b", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {second} events" in done.stdout
    assert set(pq.read_table(out).column("project").to_pylist()) == {"b"}
    for flag, rows in (("--since", second), ("--until", first)):
        out = tmp_path / f"{flag}.parquet"
        done = await jetdbt(stack, "audit", "export", flag, between.isoformat(), "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert pq.read_table(out).num_rows == rows
    bad = await jetdbt(stack, "audit", "export", "--since", "yesterday", "--out", str(out))
    assert bad.returncode == 2 and "not an ISO 8601 time" in bad.stderr

"""Capacity and the life of a run: one build per environment, team and run slots, queueing
you can see, cancel, and waiting that is never an attempt (real NATS, Postgres, dbt).

The project is tiny: a SQL model and a Python model that sleeps, so a run is short and
"another run is building" lasts long enough to be seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import aiohttp
import msgspec
import pytest
import yaml
from nats.js.errors import KeyNotFoundError

from services.runner.admission import admission
from services.runner.admission.lease import Lease
from services.runner.attempts.attempt import Cancel
from services.stack.composition import Stack
from shared import commands, identity
from shared import events as ev
from shared import logging as jlog
from shared.bus import connect
from shared.commands import BuildCommand, RunCommand
from shared.streams import LEASES
from tests.support.gate import add_gate
from tests.support.helpers import auth_headers, deploy_and_wait, get_json, jetdbt, wait_for
from tests.support.processes import runner_process, runners_apart, sweep_after_kill

SLOW_MODEL = """
import time


def model(dbt, session):
    dbt.config(materialized="table")
    time.sleep(float(dbt.config.get("seconds")))
    return dbt.ref("orders")
"""


def tiny_project(
    folder: Path, seconds: float, warehouse: str | None = None, release: Path | None = None
) -> Path:
    """`orders` (SQL) and `slow` (sleeps `seconds`); with `release`, the gate model too."""
    (folder / "models" / "marts").mkdir(parents=True)
    (folder / "dbt_project.yml").write_text(
        'name: capa\nversion: "1.0.0"\nconfig-version: 2\nprofile: capa\n'
    )
    (folder / "models" / "orders.sql").write_text("select 1 as id\n")
    (folder / "models" / "slow.py").write_text(SLOW_MODEL)
    (folder / "models" / "slow.yml").write_text(
        f"models:\n  - name: slow\n    config:\n      seconds: {seconds}\n"
    )
    if warehouse:
        (folder / "jetdbt.yaml").write_text(f"profile:\n  warehouse: {warehouse}\n")
    if release:
        add_gate(folder, release)
    return folder


class Recorder:
    """Every event published while it listens, in the order they arrived."""

    def __init__(self):
        self.events: list[ev.Event] = []

    async def start(self, bus) -> Recorder:
        self._sub = await bus.nc.subscribe("dbt.evt.>", cb=self._on)
        return self

    async def _on(self, msg) -> None:
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            self.events.append(ev.decode(msg.data))

    def of(self, kind: type, run_id: str | None = None) -> list:
        return [
            e
            for e in self.events
            if isinstance(e, kind) and (run_id is None or getattr(e, "run_id", None) == run_id)
        ]

    async def final(self, run_id: str, timeout: float = 180) -> ev.Event:
        async def found():
            ends = self.of(ev.RunFinished, run_id) + self.of(ev.RunRefused, run_id)
            return ends[0] if ends else None

        return await wait_for(found, timeout=timeout, interval=0.1)

    def build_span(self, run_id: str, attempt: int | None = None) -> tuple:
        """From the run's node events: its first node's start to its last node's finish."""
        times = [
            e.started_at or e.at
            for e in self.of(ev.NodeStarted, run_id)
            if attempt is None or e.attempt == attempt
        ]
        times += [
            e.node.finished_at or e.at
            for e in self.of(ev.NodeFinished, run_id)
            if attempt is None or e.attempt == attempt
        ]
        return min(times), max(times)


async def submit(bus, project: str, run_id: str, principal: str = "ana") -> None:
    """A run command published as `principal`, as another system would: in this order."""
    cmd = RunCommand(command=BuildCommand(), run_id=run_id, requested_by=principal)
    await bus.publish_command("run", project, cmd, run_id, principal=principal)


def assert_no_overlap(spans: list[tuple]) -> None:
    spans = sorted(spans)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans


async def test_admission_keeps_order_slots_and_cancel(nats_url):
    """Without dbt: the lowest waiting command goes first on its environment, a team never
    holds more than its slots, the run slots cap all, and a cancelled waiter leaves."""
    bus = await connect(nats_url, "admission-test")
    said: dict[str, list[admission.Blocked]] = {}

    def entrant(run_id: str, seq: int, environment: str, team: str = "t") -> admission.Admission:
        return admission.Admission(
            bus,
            environment=environment,
            team=team,
            seq=seq,
            holder={"run_id": run_id},
            runs=3,
            per_team=2,
        )

    async def enter(run_id: str, seq: int, environment: str, team: str = "t", cancel=None):
        async def heard(blocked):
            said.setdefault(run_id, []).append(blocked)

        return await entrant(run_id, seq, environment, team).enter(cancel or Cancel(), heard)

    async def release(leases) -> None:
        for lease in leases:
            await lease.release()

    try:
        async with admission.mirrored(bus, jlog.get("test")):
            first = await enter("a", 1, "e1")
            later = asyncio.create_task(enter("c", 3, "e1"))
            earlier = asyncio.create_task(enter("b", 2, "e1"))
            await wait_for(lambda: _said(said, "b", "c"))
            assert said["b"][-1] == admission.Blocked("waiting for run 'a' on environment e1", 1)
            # c asked first but waits behind b, and says so within admission.PLACE_EVERY.
            await wait_for(lambda: _said_place(said, "c", 2), timeout=admission.PLACE_EVERY + 3)
            await release(first)
            second = await asyncio.wait_for(earlier, 10)  # b before c, whoever asked first
            assert not later.done()
            await release(second)
            third = await asyncio.wait_for(later, 10)
            # Team t holds c's slot; one more of t fits, the next waits for the team.
            other = await enter("d", 4, "e2")
            capped = asyncio.create_task(enter("e", 5, "e3"))
            await wait_for(lambda: _said(said, "e"))
            assert said["e"][-1].reason == "team t has 2 of 2 runs"
            # Another team takes the third and last run slot; a fourth run waits for a slot.
            u = await enter("f", 6, "e4", team="u")
            cancel = Cancel()
            full = asyncio.create_task(enter("g", 7, "e5", team="u", cancel=cancel))
            await wait_for(lambda: _said(said, "g"))
            assert said["g"][-1].reason == "all 3 run slots are taken"
            cancel.request("ana")
            assert await asyncio.wait_for(full, 10) is None  # cancelled while it waited
            leases = await bus.js.key_value(LEASES)
            assert not [k for k in await leases.keys() if k.startswith("wait.") and "0007" in k]
            await release(third + other + u)
            await release(await asyncio.wait_for(capped, 10))
    finally:
        await bus.close()


async def test_a_lease_renewed_behind_its_back_is_still_released(nats_url):
    """A renewal cancelled in flight can store a revision the lease never heard of; the
    release still deletes the key (left, it would hold the next run for its TTL)."""
    bus = await connect(nats_url, "lease-test")
    try:
        lease = Lease(bus, "slot.0", "a run slot", {"run_id": "r"})
        await lease.take()
        kv = await bus.js.key_value(LEASES)
        await kv.update("slot.0", lease.value, last=lease.revision)  # the lease never hears
        await lease.release()
        with pytest.raises(KeyNotFoundError):
            await kv.get("slot.0")
    finally:
        await bus.close()


async def test_a_run_being_prepared_keeps_its_place(nats_url):
    """Without dbt: a run announced before it is prepared (its environment not known yet)
    holds back one submitted after it, on any environment, until its wait entries say
    where it waits; then the later run on another environment goes."""
    bus = await connect(nats_url, "admission-test")
    said: list[admission.Blocked] = []

    async def heard(blocked):
        said.append(blocked)

    try:
        async with admission.mirrored(bus, jlog.get("test")):
            await admission.announce(bus, 1, {"run_id": "slow-to-prepare"})
            later = admission.Admission(
                bus, environment="e2", team="t", seq=2, holder={"run_id": "later"},
                runs=3, per_team=2,
            )  # fmt: skip
            going = asyncio.create_task(later.enter(Cancel(), heard))
            await wait_for(lambda: _true(said))
            assert said[-1] == admission.Blocked(
                "waiting for run 'slow-to-prepare', submitted before it, to start", 2
            )
            assert not going.done()
            first = admission.Admission(
                bus, environment="e1", team="t", seq=1, holder={"run_id": "slow-to-prepare"},
                runs=3, per_team=2,
            )  # fmt: skip
            held = await asyncio.wait_for(first.enter(Cancel(), heard), 10)
            taken = await asyncio.wait_for(going, 10)  # announcement withdrawn: it goes
            for lease in [*held, *taken]:
                await lease.release()
    finally:
        await bus.close()


async def _true(items: list) -> bool:
    return bool(items)


async def _said(said: dict, *run_ids: str) -> bool:
    return all(said.get(r) for r in run_ids)


async def _said_place(said: dict, run_id: str, position: int) -> bool:
    return bool(said.get(run_id)) and said[run_id][-1].position == position


def most_at_once(intervals: list[tuple]) -> int:
    """The most intervals open at one moment (an end before a start at the same instant)."""
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    now = peak = 0
    for _, step in points:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.dbt
async def test_runs_of_one_environment_queue_visibly_and_never_overlap(stack, tmp_path):
    project = tiny_project(tmp_path / "capa", seconds=1.0)
    await deploy_and_wait(stack.bus, project, "capa")
    rec = await Recorder().start(stack.bus)
    run_ids = [f"one{i}" for i in range(6)]
    for run_id in run_ids:
        await submit(stack.bus, "capa", run_id)
    seen_queued: list[tuple[str, str, int]] = []

    async def watch() -> None:
        while True:
            _, body = await get_json(f"{stack.api_url}/v1/projects/capa/runs")
            runs = body.get("runs", [])
            if any(r["status"] == "running" for r in runs):
                seen_queued.extend(
                    (r["run_id"], r["queue_reason"], r["queue_position"])
                    for r in runs
                    if r["status"] == "queued"
                )
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())
    try:
        finals = [await rec.final(run_id) for run_id in run_ids]
    finally:
        watcher.cancel()
    assert [f.result.status for f in finals] == ["passed"] * 6, [f.result.error for f in finals]
    # Waiting is not an attempt: every run started once, as attempt 1.
    assert [f.attempt for f in finals] == [1] * 6
    assert sorted(e.run_id for e in rec.of(ev.RunStarted)) == run_ids
    assert not rec.of(ev.RunAttemptLost)
    assert_no_overlap([rec.build_span(r) for r in run_ids])
    assert seen_queued, "the API never showed a queued run while another ran"
    run_id, reason, position = seen_queued[0]
    assert reason.startswith("waiting for run") and "on environment duckdb file" in reason
    assert position >= 1
    # Those that waited started in the order they were submitted.
    queued = {e.run_id for e in rec.of(ev.RunQueued)}
    seqs = {e.run_id: e.command_seq for e in rec.of(ev.RunRequested)}
    started = [e.run_id for e in rec.of(ev.RunStarted) if e.run_id in queued]
    assert started == sorted(started, key=seqs.__getitem__), (started, seqs)

    # The record keeps how long each queued run waited.
    async def projected():
        _, body = await get_json(f"{stack.api_url}/v1/runs/{started[-1]}")
        return body if body.get("status") == "passed" else None

    body = await wait_for(projected)
    assert body["queued_seconds"] > 0 and body["queue_position"] is None
    # /metrics counts the waits of started runs, and nothing is queued any more.
    url = f"{stack.api_url}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url, headers=auth_headers(url)) as r:
        metrics = dict(
            line.split(" ", 1) for line in (await r.text()).splitlines() if line[:1] != "#"
        )
    assert metrics["jetdbt_runs_queued"] == "0"
    assert int(metrics["jetdbt_run_queue_wait_seconds_count"]) >= len(queued)
    assert float(metrics["jetdbt_run_queue_wait_seconds_sum"]) > 0


@pytest.mark.dbt
async def test_two_teams_share_the_run_slots(settings, tmp_path):
    """4 environments, 2 teams of 4 runs: never more than MAX_RUNS_PER_TEAM (2) of a team
    or MAX_CONCURRENT_RUNS (4) in all, and both teams progress (the defaults, not lowered)."""
    warehouses = tmp_path / "warehouses.yaml"
    warehouses.write_text(
        yaml.safe_dump(
            {
                "warehouses": {
                    f"w{i}": {"type": "duckdb", "path": str(tmp_path / f"w{i}.duckdb")}
                    for i in range(4)
                }
            }
        )
    )
    stack = await Stack(msgspec.structs.replace(settings, warehouses_file=warehouses)).start()
    try:
        assert (stack.settings.max_concurrent_runs, stack.settings.max_runs_per_team) == (4, 2)
        for name, team in (("ana", "alpha"), ("bo", "beta")):
            await identity.put_principal(stack.bus, identity.Principal(name=name, team=team))
        # The four deploys need nothing of each other: their parses overlap.
        await asyncio.gather(
            *(
                deploy_and_wait(
                    stack.bus,
                    tiny_project(tmp_path / f"p{i}", seconds=2.0, warehouse=f"w{i}"),
                    f"p{i}",
                )
                for i in range(4)
            )
        )
        rec = await Recorder().start(stack.bus)
        teams = {"ana": "alpha", "bo": "beta"}
        runs = {f"{who}{i}": (who, f"p{i}") for who in teams for i in range(4)}
        for run_id, (who, project) in runs.items():
            await submit(stack.bus, project, run_id, principal=who)
        finals = {run_id: await rec.final(run_id) for run_id in runs}
    finally:
        await stack.stop()
    assert all(f.result.status == "passed" for f in finals.values()), finals
    started = {e.run_id: e.at for e in rec.of(ev.RunStarted)}
    spans = {run_id: (started[run_id], finals[run_id].at) for run_id in runs}
    by_team = {
        team: [spans[r] for r, (who, _) in runs.items() if teams[who] == team]
        for team in teams.values()
    }
    assert most_at_once(list(spans.values())) <= 4, spans
    assert all(most_at_once(s) <= 2 for s in by_team.values()), by_team
    # Both progress: each team started a run before the other had finished all of its own.
    alpha, beta = by_team["alpha"], by_team["beta"]
    assert min(s for s, _ in beta) < max(e for _, e in alpha)
    assert min(s for s, _ in alpha) < max(e for _, e in beta)
    reasons = {e.reason for e in rec.of(ev.RunQueued)}
    assert "team alpha has 2 of 2 runs" in reasons, reasons
    assert {e.team for e in rec.of(ev.RunQueued)} <= {"alpha", "beta"}


@pytest.mark.dbt
async def test_a_killed_runner_s_lease_expires_and_the_waiting_runs_go_on(settings, tmp_path):
    release = tmp_path / "release"
    project = tiny_project(tmp_path / "capa", seconds=0.5, release=release)
    base, warehouses = runners_apart(settings, tmp_path)
    reader = await Stack(base, runner=False).start()
    runner_a = runner_process(base, tmp_path / "a", warehouses)
    runner_b = None
    try:
        await deploy_and_wait(reader.bus, project, "capa")
        rec = await Recorder().start(reader.bus)
        for run_id in ("k1", "k2", "k3"):
            await submit(reader.bus, "capa", run_id)

        async def gate_building():
            return any(e.unique_id == "model.capa.gate" for e in rec.of(ev.NodeStarted, "k1"))

        await wait_for(gate_building, timeout=240)
        await wait_for(lambda: _queued(rec, "k2", "k3"), timeout=30)
        leases = await reader.bus.js.key_value(LEASES)
        held = [k for k in await leases.keys() if k.startswith("env-")]
        assert len(held) == 1
        os.killpg(runner_a.pid, signal.SIGKILL)  # the runner and its dbt, holding the lease
        release.touch()
        runner_b = await Stack(
            msgspec.structs.replace(base, home=tmp_path / "b", runner_name="runner-b"),
            projectors=False,
            api=False,
        ).start()
        finals = [await rec.final(run_id) for run_id in ("k1", "k2", "k3")]
    finally:
        if runner_a.poll() is None:
            os.killpg(runner_a.pid, signal.SIGKILL)
        sweep_after_kill(runner_a, tmp_path / "a")
        if runner_b is not None:
            await runner_b.stop()
        await reader.stop()
    assert [f.result.status for f in finals] == ["passed"] * 3, [f.result.error for f in finals]
    # k1 was redelivered as attempt 2 once its lease expired; k2 and k3 only ever waited.
    assert [f.attempt for f in finals] == [2, 1, 1]
    assert [e.attempt for e in rec.of(ev.RunAttemptLost)] == [1]
    reborn = rec.of(ev.RunStarted, "k1")[-1]
    assert reborn.runner == "runner-b"
    waited = [e.reason for e in rec.of(ev.RunQueued, "k1") if e.attempt == 2]
    assert waited and waited[0].startswith("waiting for run 'k1'"), waited
    assert_no_overlap([rec.build_span("k1", attempt=2), rec.build_span("k2"), rec.build_span("k3")])


async def _queued(rec: Recorder, *run_ids: str) -> bool:
    return all(rec.of(ev.RunQueued, r) for r in run_ids)


async def _post(url: str) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, headers=auth_headers(url)) as resp,
    ):
        return resp.status, await resp.json()


@pytest.mark.dbt
async def test_cancel_a_queued_run_a_running_run_and_one_not_delivered_yet(stack, tmp_path):
    release = tmp_path / "release"  # never touched: the gated run builds until cancelled
    project = tiny_project(tmp_path / "capa", seconds=0.1, release=release)
    await deploy_and_wait(stack.bus, project, "capa")
    rec = await Recorder().start(stack.bus)
    await submit(stack.bus, "capa", "held")

    async def gate_building():
        return any(e.unique_id == "model.capa.gate" for e in rec.of(ev.NodeStarted, "held"))

    # The second run is sent once the first holds the environment: sent together, either
    # could reach the lease first, and the one that did would build the gate for minutes.
    await wait_for(gate_building, timeout=240)
    await submit(stack.bus, "capa", "waits")

    async def shown_queued():
        _, body = await get_json(f"{stack.api_url}/v1/runs/waits")
        return body if body.get("status") == "queued" else None

    body = await wait_for(shown_queued)
    assert body["queue_reason"].startswith("waiting for run 'held'"), body
    assert body["queue_position"] == 1 and body["queued_at"]

    # The queued run, through the API: it never starts.
    status, answer = await _post(f"{stack.api_url}/v1/runs/waits/cancel")
    assert status == 202, answer
    waits = await rec.final("waits", timeout=60)
    assert isinstance(waits, ev.RunFinished) and waits.result.status == "cancelled"
    assert waits.result.cancelled_by and waits.attempt == 0
    assert not rec.of(ev.RunStarted, "waits") and not rec.of(ev.NodeStarted, "waits")

    # A cancel naming another project does not reach the run, nor is it recorded for it.
    stray = commands.CancelCommand(run_id="held")
    await stack.bus.publish_command("cancel", "other", stray, "held", principal="ana")
    await asyncio.sleep(1.0)
    assert not rec.of(ev.RunCancelRequested, "held") and not rec.of(ev.RunFinished, "held")

    # The running run, from the command line: its dbt is killed mid-gate.
    done = await jetdbt(stack, "cancel", "held", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "run held cancelled by" in done.stdout
    held = await rec.final("held", timeout=30)
    assert held.result.status == "cancelled" and held.attempt == 1
    assert held.result.cancelled_by and not release.exists()
    # What dbt finished stands; the gate it was killed in is recorded cancelled.
    nodes = {n.unique_id: n for n in held.result.nodes}
    assert nodes["model.capa.gate"].status == "cancelled", nodes["model.capa.gate"]
    assert nodes["model.capa.orders"].outcome == "passed"

    # A cancel published before its run: recorded, it wins once the run arrives.
    early = commands.CancelCommand(run_id="early", requested_by="ana")
    await stack.bus.publish_command("cancel", "capa", early, "early", principal="ana")
    await wait_for(lambda: _recorded(rec, "early"), timeout=30)
    await submit(stack.bus, "capa", "early")
    final = await rec.final("early", timeout=120)
    assert final.result.status == "cancelled" and final.result.cancelled_by == "ana"
    assert not rec.of(ev.RunStarted, "early")

    async def projected():
        _, body = await get_json(f"{stack.api_url}/v1/runs/early")
        return body if body.get("status") == "cancelled" else None

    assert (await wait_for(projected))["result"]["cancelled_by"] == "ana"
    # Hostile or late cancels are refused, naming why.
    assert (await _post(f"{stack.api_url}/v1/runs/nosuch/cancel"))[0] == 404
    status, answer = await _post(f"{stack.api_url}/v1/runs/held/cancel")
    assert status == 409 and "has ended" in answer["error"], answer
    assert (await _post(f"{stack.api_url}/v1/runs/BAD%20ID/cancel"))[0] == 400
    late = await jetdbt(stack, "cancel", "held")
    assert late.returncode == 2 and "has ended" in late.stderr


async def _recorded(rec: Recorder, run_id: str) -> bool:
    return bool(rec.of(ev.RunCancelRequested, run_id))

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

import aiohttp
import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.runner.admission import admission, queue_cap
from jetdbt.services.runner.admission.lease import Lease
from jetdbt.services.runner.attempts.attempt import Cancel
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import commands
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import LEASES
from jetdbt.shared.identity import principals
from jetdbt.shared.process import logging as jlog
from nats.js.errors import KeyNotFoundError

from tests.support.helpers import (
    auth_headers,
    deploy_and_wait,
    get_json,
    jetdbt,
    live_keys,
    wait_for,
)
from tests.support.processes import runner_process, runners_apart, sweep_after_kill
from tests.support.slow_project import duckdb_warehouses, tiny_project


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
            keys = await live_keys(bus, LEASES)
            assert not [k for k in keys if k.startswith("wait.") and "0007" in k]
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


async def test_a_run_being_prepared_keeps_its_place_in_its_team_only(nats_url):
    """Without dbt: a run announced before it is prepared (its environment not known yet)
    holds back one of its team submitted after it, on any environment, until its wait
    entries say where it waits; another team's later run is not held back by it."""
    bus = await connect(nats_url, "admission-test")
    said: list[admission.Blocked] = []

    async def heard(blocked):
        said.append(blocked)

    def entrant(run_id: str, seq: int, environment: str, team: str) -> admission.Admission:
        return admission.Admission(
            bus, environment=environment, team=team, seq=seq, holder={"run_id": run_id},
            runs=3, per_team=2,
        )  # fmt: skip

    try:
        async with admission.mirrored(bus, jlog.get("test")):
            await admission.announce(bus, 1, "t", {"run_id": "slow-to-prepare"})
            going = asyncio.create_task(entrant("later", 2, "e2", "t").enter(Cancel(), heard))
            await wait_for(lambda: _true(said))
            assert said[-1] == admission.Blocked(
                "waiting for run 'slow-to-prepare', submitted before it in team t, to start", 2
            )
            other = await asyncio.wait_for(entrant("u1", 3, "e3", "u").enter(Cancel(), heard), 10)
            assert not going.done()
            first = entrant("slow-to-prepare", 1, "e1", "t")
            held = await asyncio.wait_for(first.enter(Cancel(), heard), 10)
            taken = await asyncio.wait_for(going, 10)  # the first of its team started: it goes
            for lease in [*held, *taken, *other]:
                await lease.release()
    finally:
        await bus.close()


async def test_a_freed_slot_goes_to_the_team_holding_fewest_and_queues_are_capped(nats_url):
    """Without dbt: team a holds both run slots with two more runs queued; team b's run,
    submitted last, takes the first slot that frees (b holds none, a still one), and a's
    next run the one after. A team's queue has MAX_QUEUED_RUNS_PER_TEAM places."""
    bus = await connect(nats_url, "fair-test")

    def enter(run_id: str, seq: int, team: str):
        return _entering(bus, run_id, seq, team, f"env-{run_id}", runs=2)

    try:
        async with admission.mirrored(bus, jlog.get("test")):
            a1 = await asyncio.wait_for(enter("a1", 1, "a"), 10)
            a2 = await asyncio.wait_for(enter("a2", 2, "a"), 10)
            a3, a4 = enter("a3", 3, "a"), enter("a4", 4, "a")
            b1 = enter("b1", 10, "b")
            await wait_for(lambda: _waiting(bus, 3))
            for lease in a1:
                await lease.release()
            b_leases = await asyncio.wait_for(b1, 10)
            await asyncio.sleep(2 * admission.RETRY_EVERY)
            assert not a3.done() and not a4.done()  # a holds a slot, b held none: b went
            for lease in b_leases:
                await lease.release()
            a3_leases = await asyncio.wait_for(a3, 10)
            assert not a4.done()
            for lease in [*a2, *a3_leases]:
                await lease.release()
            for lease in await asyncio.wait_for(a4, 10):
                await lease.release()

            places = [await queue_cap.take_place(bus, "a", 2, {"run_id": f"q{i}"}) for i in (1, 2)]
            with pytest.raises(queue_cap.QueueFull, match="MAX_QUEUED_RUNS_PER_TEAM"):
                await queue_cap.take_place(bus, "a", 2, {"run_id": "q3"})
            other_team = await queue_cap.take_place(bus, "b", 2, {"run_id": "b"})
            await places[0].release()
            places.append(await queue_cap.take_place(bus, "a", 2, {"run_id": "q3"}))
            for place in [*places[1:], other_team]:
                await place.release()
    finally:
        await bus.close()


async def test_teams_take_a_shared_environment_in_turns(nats_url):
    """Without dbt: one environment for every project (the default DuckDB file). Team a
    holds it with two more runs queued on it; team b's run, submitted last, has it next,
    then a's next run: a's queue delays b's run by one run, not by all of a's."""
    bus = await connect(nats_url, "turns-test")

    def enter(run_id: str, seq: int, team: str):
        return _entering(bus, run_id, seq, team, "one file", runs=4)

    try:
        async with admission.mirrored(bus, jlog.get("test")):
            a1 = await asyncio.wait_for(enter("a1", 1, "a"), 10)
            a2, a3, b1 = enter("a2", 2, "a"), enter("a3", 3, "a"), enter("b1", 10, "b")
            await wait_for(lambda: _waiting(bus, 3))
            for lease in a1:
                await lease.release()
            b_leases = await asyncio.wait_for(b1, 10)
            assert not a2.done() and not a3.done()
            for lease in b_leases:
                await lease.release()
            for lease in await asyncio.wait_for(a2, 10):
                await lease.release()
            for lease in await asyncio.wait_for(a3, 10):
                await lease.release()
    finally:
        await bus.close()


def _entering(bus, run_id: str, seq: int, team: str, environment: str, runs: int):
    """A run of `team` entering admission (2 slots a team), as a task giving its leases."""
    entry = admission.Admission(
        bus, environment=environment, team=team, seq=seq, holder={"run_id": run_id},
        runs=runs, per_team=2,
    )  # fmt: skip
    return asyncio.create_task(entry.enter(Cancel(), _nothing))


async def _nothing(blocked) -> None:
    """Where a test's waiting run tells its place: nowhere."""


async def _waiting(bus, n: int) -> bool:
    """Whether `n` runs' team wait entries are in the bucket."""
    return len([k for k in await live_keys(bus, LEASES) if k.startswith("wait.team-")]) >= n


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
    warehouses = duckdb_warehouses(tmp_path, [f"w{i}" for i in range(4)])
    stack = await Stack(msgspec.structs.replace(settings, warehouses_file=warehouses)).start()
    try:
        assert (stack.settings.max_concurrent_runs, stack.settings.max_runs_per_team) == (4, 2)
        for name, team in (("ana", "alpha"), ("bo", "beta")):
            await principals.put_principal(stack.bus, principals.Principal(name=name, team=team))
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
    # Which team is told its cap depends on which run reaches a shared environment first.
    assert reasons & {"team alpha has 2 of 2 runs", "team beta has 2 of 2 runs"}, reasons
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
        held = [k for k in await live_keys(reader.bus, LEASES) if k.startswith("env-")]
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

    # A run that must wait says why from the start, while it is still checked: its selection,
    # resolved by dbt (a second or more), matches nothing; it was told queued before that.
    misspelled = BuildCommand(select=["no_such_model"])
    cmd = RunCommand(command=misspelled, run_id="misspelled", requested_by="ana")
    await stack.bus.publish_command("run", "capa", cmd, "misspelled", principal="ana")
    refused = await rec.final("misspelled", timeout=60)
    assert isinstance(refused, ev.RunRefused) and "matches no nodes" in refused.reason, refused
    told = rec.of(ev.RunQueued, "misspelled")
    assert told and told[0].reason.startswith("waiting for run 'waits', queued before it"), told

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


SLOW_SECONDS = 6.0  # a run of the storm's slow job: longer than its schedule's interval


@pytest.mark.dbt
async def test_one_team_s_schedule_storm_leaves_another_team_s_run_one_run_behind(
    settings, tmp_path
):
    """Team alpha storms: a schedule every second (refused: under the minimum interval, at
    the CLI before its job is saved, at the API, at the runner), one every 5 s on a job
    slower than that (its fires coalesce into the run still going, never queue twice), and
    a burst of runs past its queue's cap (refused, naming MAX_QUEUED_RUNS_PER_TEAM), while
    it holds both run slots. Team beta's one run takes the first slot that frees: it waits
    at most one of alpha's runs, and starts before alpha's runs queued before it."""
    warehouses = duckdb_warehouses(tmp_path, ["wa1", "wa2", "wb"])
    limits = {"max_concurrent_runs": 2, "max_runs_per_team": 2, "max_queued_runs_per_team": 3}
    stack = await Stack(
        msgspec.structs.replace(
            settings, warehouses_file=warehouses, schedule_min_interval_seconds=5, **limits
        )
    ).start()
    try:
        for name, team in (("ana", "alpha"), ("bo", "beta")):
            await principals.put_principal(stack.bus, principals.Principal(name=name, team=team))
        await asyncio.gather(
            *(
                deploy_and_wait(stack.bus, tiny_project(tmp_path / p, SLOW_SECONDS, wh), p)
                for p, wh in (("pa1", "wa1"), ("pa2", "wa2"), ("pb", "wb"))
            )
        )
        rec = await Recorder().start(stack.bus)
        # Under the minimum interval: refused by the CLI before the job is saved, the API
        # and a runner (what another system publishes on NATS).
        cli = await jetdbt(
            stack, "schedule", "add", "fast", "--project", "pa1", "--cron", "@every 1s",
            "--select", "orders",
        )  # fmt: skip
        assert cli.returncode == 3 and "SCHEDULE_MIN_INTERVAL_SECONDS" in cli.stderr, cli
        url = f"{stack.api_url}/v1/projects/pa1/jobs"
        body = b'{"action": "schedule", "name": "slow", "cron": "* * * * * *"}'
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=body, headers=auth_headers(url)) as resp,
        ):
            assert resp.status == 400 and "1 s apart" in (await resp.json())["error"]
        save = commands.JobCommand(action="save", name="slow", job=commands.JobSpec())
        assert isinstance(await client.job(stack.bus, "pa1", _as_ana(save)), ev.JobSaved)
        fast = commands.JobCommand(action="schedule", name="slow", cron="@every 1s")
        refused = await client.job(stack.bus, "pa1", _as_ana(fast))
        assert isinstance(refused, ev.JobRefused), refused
        assert "SCHEDULE_MIN_INTERVAL_SECONDS" in refused.reason
        _, jobs = await get_json(url)
        assert [j["name"] for j in jobs["jobs"]] == ["slow"]  # `fast` was never saved

        every5 = commands.JobCommand(action="schedule", name="slow", cron="@every 5s")
        assert isinstance(await client.job(stack.bus, "pa1", _as_ana(every5)), ev.ScheduleSaved)
        # Alternating environments: alpha's first two runs take both slots, the next wait.
        burst = {f"burst{i}": f"pa{1 + i % 2}" for i in range(6)}
        for run_id, project in burst.items():
            await submit(stack.bus, project, run_id, principal="ana")

        async def alpha_holds_both_slots_and_waits():
            started = {e.run_id for e in rec.of(ev.RunStarted)}
            ended = {e.run_id for e in rec.of(ev.RunFinished)} | {
                e.run_id for e in rec.of(ev.RunRefused)
            }
            asked = {e.run_id for e in rec.of(ev.RunRequested)}
            return len(started - ended) == 2 and asked - started - ended

        await wait_for(alpha_holds_both_slots_and_waits, timeout=120, interval=0.1)
        await submit(stack.bus, "pb", "beta1", principal="bo")
        # /metrics shows alpha's queue apart from everyone's.
        alpha = 'jetdbt_team_runs_queued{team="alpha"}'
        alpha_queued = await wait_for(lambda: _metric(stack, alpha))
        beta = await rec.final("beta1", timeout=120)
        await wait_for(lambda: _coalesced(rec), timeout=60)
        coalesced = await wait_for(lambda: _metric(stack, "jetdbt_schedule_fires_coalesced_total"))
        stop = commands.JobCommand(action="unschedule", name="slow")
        await client.job(stack.bus, "pa1", _as_ana(stop))
        finals = {r: await rec.final(r, timeout=180) for r in burst}
    finally:
        await stack.stop()
    assert beta.result.status == "passed", beta.result.error
    # The burst past the queue's cap was refused, naming the setting; the rest ran.
    capped = [f for f in finals.values() if isinstance(f, ev.RunRefused)]
    assert capped and all("MAX_QUEUED_RUNS_PER_TEAM" in f.reason for f in capped), finals
    # Beta waited at most one of alpha's runs (and its own start), never alpha's queue.
    requested = {e.run_id: e for e in rec.of(ev.RunRequested)}
    started = {e.run_id: e.at for e in rec.of(ev.RunStarted)}
    ended = {e.run_id: e.at for e in rec.of(ev.RunFinished)}
    longest = max((ended[r] - started[r]).total_seconds() for r in ended if r != "beta1")
    waited = (started["beta1"] - requested["beta1"].at).total_seconds()
    assert waited <= longest + 3, (waited, longest)
    # Every alpha run still waiting when beta's was asked for started after it.
    asked = requested["beta1"].at
    waiting = {
        r: started[r] for r, e in requested.items()
        if e.team == "alpha" and e.at < asked and r in started and started[r] > asked
    }  # fmt: skip
    assert waiting and min(waiting.values()) > started["beta1"], (waiting, started["beta1"])
    # The schedule's fires never queued a run behind its own: each fire's run ended before
    # the next fire's run was asked for, and the fires meanwhile were coalesced, counted.
    fired = [e.run_id for e in rec.of(ev.ScheduleFired)]
    for earlier, later in zip(fired, fired[1:], strict=False):
        assert ended[earlier] <= requested[later].at, (earlier, later)
    joined = rec.of(ev.ScheduleCoalesced)
    assert joined and {e.run_id for e in joined} <= set(fired)
    assert alpha_queued >= 1 and coalesced >= 1


def _as_ana(command: commands.JobCommand) -> commands.JobCommand:
    return msgspec.structs.replace(command, requested_by="ana")


async def _coalesced(rec: Recorder) -> bool:
    return bool(rec.of(ev.ScheduleCoalesced))


async def _metric(stack, name: str) -> float | None:
    """The value of `name` in /metrics, once it is above zero."""
    url = f"{stack.api_url}/metrics"
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=auth_headers(url)) as resp,
    ):
        for line in (await resp.text()).splitlines():
            if line.startswith(name + " ") and float(line.split()[-1]) > 0:
                return float(line.split()[-1])
    return None

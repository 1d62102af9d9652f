"""Triggers on a stack as `jetdbt up` runs it (the triggers service as its own NATS user):
a declared write starts exactly one run of the job that reads the relation, whose end
starts the job `after` it once; the same event handled again, or a restart of every
service, starts no second run; a cycle is refused when the job is saved, naming it. Another
project's build wakes a job reading its models once, a scratch build of it none, and a
cycle across two projects is refused when the job closing it is saved."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.services.triggers.manager import Triggers
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import (
    MAX_TRIGGER_DEPTH,
    BuildCommand,
    JobAfter,
    JobCommand,
    JobRun,
    JobSpec,
    RunCommand,
)
from jetdbt.shared.jobs.triggered_jobs import JobIndex
from jetdbt.shared.runs import graph as graph_mod
from jetdbt.shared.runs.relations import normalise
from jetdbt.shared.runs.written_relations import deployed_graph, project_writes, written

from tests.support.helpers import JETDBT, cli_env, deploy_and_wait, up_stack, wait_for
from tests.support.paths import EXAMPLE
from tests.support.relation_facts import relation_written
from tests.support.schedule_fires import SPEC, events, messages

pytestmark = pytest.mark.dbt

PROJECT = "jaffle_shop"
FEED = "dbt://main/raw/orders_feed"  # written by another system, read by job `feed`
OPERATION = ("--command", "run-operation", "--macro", "cents_to_dollars", "--macro-args",
             "{column_name: amount}")  # fmt: skip


def _save(name: str, **triggers) -> JobCommand:
    spec = JobSpec(command=SPEC.command, **triggers)
    return JobCommand(action="save", name=name, job=spec)


async def jetdbt(stack, *args: str) -> subprocess.CompletedProcess:
    """The console script as the operator runs it beside `jetdbt up` (its NATS login)."""
    env = {**cli_env(stack), "JETDBT_HOME": str(stack.settings.home)}
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=300)
    return await asyncio.to_thread(run, [JETDBT, *args], env=env)


async def _refused(bus, seq: int) -> ev.JobRefused | None:
    found = await bus.last_event(subjects.job_refused(PROJECT))
    return found if isinstance(found, ev.JobRefused) and found.command_seq == seq else None


async def _runs_of(js, job: str) -> list[ev.RunRequested]:
    return [r for r in await events(js, ev.RunRequested) if r.job == job]


async def _finished(js, run_id: str) -> ev.RunFinished | None:
    found = [f for f in await events(js, ev.RunFinished) if f.run_id == run_id]
    return found[0] if found else None


async def _orders_relation(bus) -> str:
    deployed = await bus.last_event(subjects.deploy_event(PROJECT, "deployed"))
    stored = await bus.last_event(subjects.graph_event(PROJECT, "version", deployed.version))
    graph = graph_mod.decode(await bus.get_blob(stored.graph_digest))
    return normalise(next(n.relation for n in graph.nodes if n.name == "orders" and n.relation))


@pytest.mark.timeout(900)
async def test_a_declared_write_triggers_one_run_and_its_end_one_after_run(tmp_path, pg_url):
    home = tmp_path / "home"
    stack = await up_stack(home, pg_url)
    try:
        bus = stack.bus
        await deploy_and_wait(bus, EXAMPLE, PROJECT)
        # The jobs as docs/guide.md saves them.
        for name, *triggers in (
            ("feed", "--on-relation", FEED),
            ("cleanup", "--after", "feed", "--outcome", "passed"),
        ):
            saved = await jetdbt(stack, "job", "save", name, "--project", PROJECT, *OPERATION,
                                 *triggers)  # fmt: skip
            assert saved.returncode == 0, saved.stderr
        listed = await jetdbt(stack, "job", "list", "--project", PROJECT)
        assert f"on {FEED}" in listed.stdout and "after feed (passed)" in listed.stdout

        # Cycles and impossible subscriptions are refused when saved, naming why.
        looped = await jetdbt(stack, "job", "save", "feed", "--project", PROJECT, "--after",
                              "cleanup")  # fmt: skip
        assert looped.returncode != 0
        assert "cycle: job feed after cleanup after feed" in looped.stderr, looped.stderr
        itself = await client.job(bus, PROJECT, _save("self", after=JobAfter(job="self")))
        assert isinstance(itself, ev.JobRefused) and "self after self" in itself.reason
        orders = await _orders_relation(bus)
        own = await client.job(bus, PROJECT, _save("loop", on_relation=[orders]))
        assert isinstance(own, ev.JobRefused), own
        assert "cycle" in own.reason and "model orders" in own.reason and orders in own.reason
        nowhere = await client.job(bus, PROJECT, _save("far", on_relation=["dbt://nowhere/a/b"]))
        assert isinstance(nowhere, ev.JobRefused) and "nowhere" in nowhere.reason
        # A hostile job command on NATS: a relation spelled unlike every producer's, an
        # outcome that is none.
        for spec, reason in (
            ({"on_relation": ["dbt://main/RAW/x"]}, "spelled 'dbt://main/raw/x'"),
            ({"after": {"job": "feed", "outcome": "sometimes"}}, "outcome"),
        ):
            body = {"action": "save", "name": "bad", "job": spec}
            sent = await bus.js.publish(
                subjects.command("job", PROJECT, "ops"), json.dumps(body).encode()
            )
            refused = await wait_for(
                lambda s=sent.seq: _refused(bus, s), timeout=60
            )  # fmt: skip
            assert reason in refused.reason, refused.reason

        # Another system declares a write of the relation `feed` reads.
        await bus.js.publish(
            subjects.intake_write("ingest", FEED), relation_written(FEED, "ingest")
        )
        fed = await wait_for(lambda: _runs_of(bus.js, "feed"), timeout=120)
        assert [(r.trigger, r.depth) for r in fed] == [("relation", 1)], fed
        done = await wait_for(lambda: _finished(bus.js, fed[0].run_id), timeout=300)
        assert done.result.status == "passed", done.result.error
        chained = await wait_for(lambda: _runs_of(bus.js, "cleanup"), timeout=120)
        assert [(r.trigger, r.depth) for r in chained] == [("after", 2)], chained
        await wait_for(lambda: _finished(bus.js, chained[0].run_id), timeout=300)

        # The same event handled again starts nothing: its run id is the one it started.
        write = next(
            m for m in await messages(bus.js, "DBT_EVENTS", subjects.relation_event(FEED, "*"))
            if isinstance(ev.decode(m.data), ev.RelationMaterialized)
        )  # fmt: skip
        index = JobIndex()
        await index.load(bus)
        await Triggers(bus).handle(index, write.metadata.sequence.stream, write.subject, write.data)
    finally:
        await stack.stop()

    # Every service restarts on the same server data; nothing fires a second time.
    stack = await Stack(stack.settings).start()
    try:
        await asyncio.sleep(8)
        assert len(await _runs_of(stack.bus.js, "feed")) == 1
        assert len(await _runs_of(stack.bus.js, "cleanup")) == 1
        info = await stack.bus.js.consumer_info("DBT_EVENTS", "triggers")
        assert info.num_pending == 0 and info.num_ack_pending == 0, info
    finally:
        await stack.stop()
    log = (home / "nats" / "nats-server.log").read_text()
    assert "Violation" not in log, [line for line in log.splitlines() if "Violation" in line]


SHOP_B = "shop_b"  # a copy of the example: on the embedded warehouse, a schema of its own


async def _writes(bus, project: str) -> dict[str, str]:
    """Each relation `project` writes, by node name."""
    writes = project_writes(await deployed_graph(bus, project))
    return {node.split()[1]: key for key, node in writes.items()}


async def _job(bus, project: str, name: str, spec: JobSpec) -> ev.Event:
    return await client.job(bus, project, JobCommand(action="save", name=name, job=spec))


async def _caught_up(js) -> bool:
    info = await js.consumer_info("DBT_EVENTS", "triggers")
    return info.num_pending == 0 and info.num_ack_pending == 0


@pytest.mark.timeout(900)
async def test_another_projects_build_wakes_a_job_once_and_a_cycle_is_refused(
    tmp_path, pg_url, project_copy
):
    stack = await up_stack(tmp_path / "home", pg_url)
    try:
        bus = stack.bus
        for path, project in ((EXAMPLE, PROJECT), (project_copy, SHOP_B)):
            await deploy_and_wait(bus, path, project)
        a, b = await _writes(bus, PROJECT), await _writes(bus, SHOP_B)
        assert a["orders"] != b["orders"], (a, b)
        # B's job reads two of A's models: a build of A that writes both wakes it once.
        wake = JobSpec(command=SPEC.command, on_relation=[a["orders"], a["customers"]])
        assert isinstance(await _job(bus, SHOP_B, "wake", wake), ev.JobSaved)

        # Refused when saved, naming why: B's own model (dbt orders its own DAG), and the
        # job that closes a cycle across the projects (through an `after` in B).
        own = await _job(bus, SHOP_B, "own", JobSpec(on_relation=[b["orders"]]))
        assert isinstance(own, ev.JobRefused), own
        assert f"{b['orders']}, which model orders of its own project 'shop_b'" in own.reason
        reads = JobSpec(command=SPEC.command, on_relation=[a["orders"]])
        assert isinstance(await _job(bus, SHOP_B, "reads", reads), ev.JobSaved)
        builds = JobSpec(command=BuildCommand(select=["customers"]), after=JobAfter(job="reads"))
        assert isinstance(await _job(bus, SHOP_B, "builds", builds), ev.JobSaved)
        closing = JobSpec(command=BuildCommand(select=["orders"]), on_relation=[b["customers"]])
        cycle = await _job(bus, PROJECT, "closing", closing)
        assert isinstance(cycle, ev.JobRefused), cycle
        assert cycle.reason == (
            f"cycle: job closing of project 'jaffle_shop' on {b['customers']}, which model"
            " customers of project 'shop_b' builds in job builds after reads on"
            f" {a['orders']}, which model orders of project 'jaffle_shop' builds in job closing"
        ), cycle.reason
        for name in ("reads", "builds"):
            gone = await client.job(bus, SHOP_B, JobCommand(action="delete", name=name))
            assert isinstance(gone, ev.JobDeleted), gone

        # A build of A wakes B's job once, with trigger `relation`, first in its chain.
        built = await client.run(bus, PROJECT, RunCommand(command=BuildCommand()), timeout=600)
        assert isinstance(built, ev.RunFinished) and built.result.status == "passed", built
        woken = await wait_for(lambda: _runs_of(bus.js, "wake"), timeout=120)
        assert [(r.project, r.trigger, r.depth) for r in woken] == [(SHOP_B, "relation", 1)]
        done = await wait_for(lambda: _finished(bus.js, woken[0].run_id), timeout=300)
        assert done.result.status == "passed", done.result.error
        # What the build wrote, read the same from nodes kept in a blob as inline.
        nodes = built.result.nodes
        data = msgspec.json.encode(nodes)
        blob = ev.Blob(digest=await bus.put_blob(data), size=len(data), count=len(nodes))
        kept = msgspec.structs.replace(
            built, result=msgspec.structs.replace(built.result, nodes=[]), nodes_blob=blob
        )
        wrote = await written(bus, built)
        assert await written(bus, kept) == wrote >= {a["orders"], a["customers"]}, wrote

        # A build of A into a scratch schema writes none of A's relations: it wakes nothing.
        scratch = BuildCommand(schema="scratch_t")
        tried = await client.run(bus, PROJECT, RunCommand(command=scratch), timeout=600)
        assert isinstance(tried, ev.RunFinished) and tried.result.status == "passed", (
            tried.result.error
        )
        await wait_for(lambda: _caught_up(bus.js), timeout=60)
        assert len(await _runs_of(bus.js, "wake")) == 1

        # A chain deeper than the bound is recorded and refused, naming why.
        deep = RunCommand(
            command=JobRun(name="wake"), trigger="relation", depth=MAX_TRIGGER_DEPTH + 1
        )
        refused = await client.run(bus, SHOP_B, deep, timeout=120)
        assert isinstance(refused, ev.RunRefused), refused
        assert "trigger chain too deep" in refused.reason, refused.reason
    finally:
        await stack.stop()
    log = (tmp_path / "home" / "nats" / "nats-server.log").read_text()
    assert "Violation" not in log, [line for line in log.splitlines() if "Violation" in line]

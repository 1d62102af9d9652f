"""Record a real event log, so tests of projections, replay, audit and the API need not run dbt.

Runs the real stack (an embedded nats-server and a runner with real dbt on
DuckDB; no Postgres, nothing here reads a projection) on examples/jaffle_shop:

1. deploy jaffle_shop;
2. a passing build (it publishes state for its environment);
3. a failing build, `--vars '{fail_error_test: true}'`: an error-severity test fails;
4. `dbt retry` of the failing run (it fails again: a retry restores the run's vars);
5. a build of a project never deployed (refused);
6. a malformed run command (refused as `c<command sequence>`);
7. two declared writes: one on jaffle_shop's `orders`, one naming a warehouse that is
   not configured (refused by the runner's relation watch).
8. a job scheduled yearly and paused, and another saved and deleted (`--jobs` appends
   only this step's facts to a recording made before it);
9. webhooks: three added, one removed; a run's start told to a receiver answering 500 then
   200 and to one that never answers 2xx (`--hooks` appends only the hooks' facts);
10. what the warehouse says: the example with a stale source (tests/support/stale_source.py)
   built, its freshness checked (warn) and its docs generated (`--warehouse` appends the
   facts of those two runs, named `freshness` and `docs` in the meta line).

It writes every message of DBT_COMMANDS and DBT_EVENTS in stream order (subject,
headers including Nats-Msg-Id, data) and every object-store blob a message names
by a `*_digest` field to `tests/recorded/jaffle_shop.jsonl.gz`, one JSON document
a line: first a `meta` line naming the runs, then the blobs, then the messages.
tests/support/recorded_log.py republishes it into a test's stack.

Re-record when event shapes change (a new event, a new field a fold or the audit
reads), from the repository root:

    .venv/bin/python -m tests.support.record_log

then run the tests that read it (`grep -l recorded_log tests/*.py`) and commit
the new file with the change. Until then the old recording keeps working: the
golden fixtures in tests/golden hold every event version and prove that old
events stay decodable, so a recording only grows stale, never unreadable.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import shutil
import sys
import tempfile
import time
from pathlib import Path

import msgspec
from aiohttp import web
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import (
    BuildCommand,
    JobCommand,
    JobSpec,
    ModelsCommand,
    RetryCommand,
    RunCommand,
    dbt_command,
)
from jetdbt.shared.bus.stream_batches import last_matching, last_seq
from jetdbt.shared.bus.streams import BLOBS, COMMANDS, EVENTS
from jetdbt.shared.jobs.hook_control import ask_notifier
from jetdbt.shared.jobs.webhooks import HookRequest
from jetdbt.shared.process.config import load
from nats.js.errors import ObjectNotFoundError

from tests.support.helpers import deploy_and_wait
from tests.support.paths import EXAMPLE, RECORDED
from tests.support.stale_source import add_stale_source

__all__ = ["PATH", "PROJECT", "record"]

PATH = RECORDED / "jaffle_shop.jsonl.gz"
PROJECT = "jaffle_shop"
PRINCIPAL = "ann"
MAX_BYTES = 2 * 1024 * 1024
# Step 9's receiver listens on loopback; two quick attempts make one delivery dead.
HOOKS = {
    "JETDBT_WEBHOOK_HOSTS": "127.0.0.1",
    "JETDBT_WEBHOOK_RETRY_SECONDS": "0.1",
    "JETDBT_WEBHOOK_ATTEMPTS": "2",
}


def _declared_write(relation: str, rows: int) -> tuple[str, bytes]:
    """A write declared the way another system does it: a plain NATS publish."""
    body = {
        "type": "relation.materialized.v1",
        "relation": relation,
        "producer": "ingest",
        "row_count": rows,
        "at": "2025-06-02T09:12:00+00:00",
    }
    return subjects.relation_event(relation, "materialized"), msgspec.json.encode(body)


async def _until(probe, timeout: float = 60):
    async with asyncio.timeout(timeout):
        while not (found := await probe()):
            await asyncio.sleep(0.1)
    return found


async def _quiet(js, still: float = 1.0) -> None:
    """Wait until nothing more lands on the event stream for `still` seconds."""
    seen = -1
    while (now := await last_seq(js, EVENTS)) != seen:
        seen = now
        await asyncio.sleep(still)


def _digests(doc) -> set[str]:
    """Every string under a key ending in `_digest`, at any depth."""
    if isinstance(doc, dict):
        found = {v for k, v in doc.items() if k.endswith("_digest") and isinstance(v, str)}
        return found.union(*(_digests(v) for v in doc.values()))
    if isinstance(doc, list):
        return set().union(*(_digests(v) for v in doc))
    return set()


async def _messages(js, stream: str) -> list[dict]:
    out = []
    for seq in range(1, await last_seq(js, stream) + 1):
        msg = await js.get_msg(stream, seq)
        out.append(
            {
                "kind": "message",
                "stream": stream,
                "seq": msg.seq,
                "subject": msg.subject,
                "headers": dict(msg.headers or {}),
                "data": msg.data.decode(),
            }
        )
    return out


async def _blobs(js, messages: list[dict]) -> list[dict]:
    store = await js.object_store(BLOBS)
    named = set()
    for m in messages:
        try:
            named |= _digests(msgspec.json.decode(m["data"]))
        except msgspec.DecodeError:
            continue  # the malformed command, kept as sent
    out = []
    for digest in sorted(named):
        try:
            data = (await store.get(digest)).data
        except ObjectNotFoundError:
            continue  # a digest of something never stored (a profile, a graph's content)
        out.append({"kind": "blob", "digest": digest, "data": base64.b64encode(data).decode()})
    return out


async def _jobs(bus) -> None:
    """A job scheduled yearly (it never fires while recording) and paused; another saved and
    deleted: what the jobs fold reads. No dbt runs for them."""
    spec = JobSpec(command=ModelsCommand(select=["+orders"]))
    for action, name, extra in (
        ("save", "nightly", {"job": spec}),
        ("schedule", "nightly", {"cron": "0 0 6 1 1 *", "tz": "Europe/Paris"}),
        ("pause", "nightly", {}),
        ("save", "once", {"job": spec}),
        ("delete", "once", {}),
    ):
        done = await client.job(
            bus, PROJECT, JobCommand(action=action, name=name, requested_by=PRINCIPAL, **extra)
        )
        assert not isinstance(done, ev.JobRefused), done
    await _quiet(bus.js)


async def _hooks(stack: Stack) -> None:
    """Hooks added through the notifier, one removed, and the deliveries of one run start
    (a fact published here: no dbt runs) to a real receiver: retried, delivered, dead."""
    statuses = [500, 200]

    async def receive(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=statuses.pop(0) if statuses else 503)

    app = web.Application()
    app.router.add_post("/hook", receive)
    site_runner = web.AppRunner(app)
    await site_runner.setup()
    await web.TCPSite(site_runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{site_runner.addresses[0][1]}/hook"
    try:
        for action, name, on in (("add", "pager", ["start", "failure"]), ("add", "chat", ["end"]),
                                 ("add", "gone", ["start"]), ("remove", "chat", [])):  # fmt: skip
            asked = HookRequest(action=action, name=name, url=url, on=on, principal=PRINCIPAL)
            reply = await ask_notifier(stack.bus, PROJECT, asked)
            assert not reply.error, reply
        await stack.bus.publish(ev.RunStarted(project=PROJECT, run_id="hooked", attempt=1,
                                              version="sha256:" + "0" * 64))  # fmt: skip
        await _until(lambda: last_matching(stack.bus.js, EVENTS, "dbt.evt.hook.*.gone.delivery"))
        await _quiet(stack.bus.js, still=2.0)
    finally:
        await site_runner.cleanup()


async def _warehouse(stack: Stack, home: str) -> dict[str, str]:
    """The example with a stale source, built; its freshness checked and its docs generated.
    Returns the two runs' ids by role, and their subjects' token is what step 10 keeps."""
    project = Path(home) / "project"
    shutil.copytree(EXAMPLE, project)
    add_stale_source(project)
    await deploy_and_wait(stack.bus, project, PROJECT, requested_by=PRINCIPAL)
    runs = {}
    for role, name in (("build", "build"), ("freshness", "source freshness"),
                       ("docs", "docs generate")):  # fmt: skip
        done = await client.run(
            stack.bus, PROJECT, RunCommand(command=dbt_command(name), requested_by=PRINCIPAL)
        )
        assert isinstance(done, ev.RunFinished) and done.result.status == "passed", done
        runs[role] = done.run_id
    await _quiet(stack.bus.js)
    return {"freshness": runs["freshness"], "docs": runs["docs"]}


async def append(step: str, path: Path = PATH) -> None:
    """Add step 8's (`--jobs`), 9's (`--hooks`) or 10's (`--warehouse`) facts to a recording
    made before it: the step on a fresh stack, its DBT_EVENTS messages of that family (step
    10: of its two runs) renumbered after the recording's own, with the blobs they name.
    Its commands are left out: a schedule's definition would fire again wherever the
    recording is republished."""
    lines = gzip.decompress(path.read_bytes()).splitlines()
    docs = [msgspec.json.decode(line) for line in lines if line]
    last = max(d["seq"] for d in docs if d.get("stream") == EVENTS)
    with tempfile.TemporaryDirectory(prefix="jetdbt-record-") as home:
        stack = await Stack(
            load({"JETDBT_HOME": home, **HOOKS}), projectors=False, api=False
        ).start()
        try:
            roles = {}
            if step == "jobs":
                await _jobs(stack.bus)
                families = (".job.", ".schedule.")
            elif step == "hooks":
                await _hooks(stack)
                families = (".hook.",)
            else:
                roles = await _warehouse(stack, home)
                families = tuple(f".{subjects.token(r)}." for r in roles.values())
            added = [
                m
                for m in await _messages(stack.bus.js, EVENTS)
                if any(f in m["subject"] for f in families)
            ]
            blobs = await _blobs(stack.bus.js, added)
        finally:
            await stack.stop()
    for i, m in enumerate(added, start=1):
        m["seq"] = last + i
    meta, *rest = lines
    if roles:
        meta_doc = msgspec.json.decode(meta)
        meta_doc["runs"].update(roles)
        meta = msgspec.json.encode(meta_doc)
    known = {d["digest"] for d in docs if d.get("kind") == "blob"}
    new_blobs = [msgspec.json.encode(b) for b in blobs if b["digest"] not in known]
    # Blobs go before every message (republish stores them first either way).
    data = gzip.compress(
        b"\n".join([meta, *new_blobs, *rest, *(msgspec.json.encode(m) for m in added)]) + b"\n",
        mtime=0,
    )
    path.write_bytes(data)
    print(f"appended {len(added)} messages to {path}", file=sys.stderr)


async def _scenario(stack: Stack, home: str) -> dict:
    bus, js = stack.bus, stack.bus.js
    step = time.perf_counter()

    def timed(what: str) -> None:
        nonlocal step
        print(f"{what}: {time.perf_counter() - step:.1f}s", file=sys.stderr)
        step = time.perf_counter()

    deployed = await deploy_and_wait(bus, EXAMPLE, PROJECT, requested_by=PRINCIPAL)
    timed("deploy")
    build = RunCommand(command=BuildCommand(), requested_by=PRINCIPAL)
    passed = await client.run(bus, PROJECT, build)
    assert passed.result.status == "passed", passed.result.error
    timed("passing build")
    failing = RunCommand(
        command=BuildCommand(vars={"fail_error_test": True}), requested_by=PRINCIPAL
    )
    failed = await client.run(bus, PROJECT, failing)
    assert failed.result.status == "failed", failed
    timed("failing build")
    again = RunCommand(command=RetryCommand(dbt_retry_job=failed.run_id), requested_by=PRINCIPAL)
    retried = await client.run(bus, PROJECT, again)
    assert retried.result.status == "failed", retried
    timed("retry")
    refused = await client.run(bus, "never_deployed", build)
    assert isinstance(refused, ev.RunRefused), refused
    bad = await js.publish(
        subjects.command("run", PROJECT, "ann"), b'{"command": {"label": "build", "selct": []}}'
    )
    malformed = f"c{bad.seq}"
    await _until(lambda: last_matching(js, EVENTS, subjects.run_pattern(PROJECT, malformed)))
    for relation, rows in (("dbt://main/main/orders", 99), ("dbt://lake/raw/events", 7)):
        await bus.nc.publish(*_declared_write(relation, rows))
    await _until(lambda: last_matching(js, EVENTS, "dbt.evt.relation.*.refused"))
    await _quiet(js)
    timed("refusals and declared writes")
    await _jobs(bus)
    timed("jobs")
    await _hooks(stack)
    timed("hooks")
    observed = await _warehouse(stack, home)
    timed("freshness and docs")

    return {
        "kind": "meta",
        "project": PROJECT,
        "principal": PRINCIPAL,
        "deploy_id": deployed.deploy_id,
        "version": deployed.version,
        "runs": {
            "passed": passed.run_id,
            "failed": failed.run_id,
            "retried": retried.run_id,
            "refused": refused.run_id,
            "malformed": malformed,
            **observed,
        },
        "refused_project": "never_deployed",
    }


async def record(path: Path = PATH) -> dict:
    """Run the scenario on a fresh stack and write its log to `path`; returns the meta line."""
    with tempfile.TemporaryDirectory(prefix="jetdbt-record-") as home:
        settings = load({"JETDBT_HOME": home, **HOOKS})
        stack = await Stack(settings, projectors=False, api=False).start()
        try:
            meta = await _scenario(stack, home)
            messages = await _messages(stack.bus.js, COMMANDS)
            messages += await _messages(stack.bus.js, EVENTS)
            blobs = await _blobs(stack.bus.js, messages)
        finally:
            await stack.stop()
    lines = [msgspec.json.encode(doc) for doc in (meta, *blobs, *messages)]
    data = gzip.compress(b"\n".join(lines) + b"\n", mtime=0)
    if len(data) > MAX_BYTES:
        raise RuntimeError(f"the recording is {len(data)} bytes; keep it under {MAX_BYTES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    print(
        f"wrote {path}: {len(messages)} messages, {len(blobs)} blobs, {len(data)} bytes",
        file=sys.stderr,
    )
    return meta


if __name__ == "__main__":
    flag = sys.argv[1:]
    appended = flag in (["--jobs"], ["--hooks"], ["--warehouse"])
    asyncio.run(append(flag[0].removeprefix("--")) if appended else record())

"""Fuzzing the bus: hostile commands and events cannot leave their run.

Commands are valid ones (shared/bus/commands.py) mutated, published by a NATS client of
their own on every command subject: `dbt.cmd.run|deploy|cancel.<project>`, unknown
verbs, odd project tokens up to 3,000 characters. Each run, deploy or unknown-verb
command is refused with a reason (nothing is deployed here, so one that survives its
mutation is refused too), a valid cancel is only recorded, and the runner lives on.

Events are the golden fixtures (tests/golden) mutated, published on their family's
subjects (`dbt.evt.run|node|deploy|graph|retry|state|relation.…`). Each that does not
decode is dead-lettered by its projection with its error; one that decodes is applied
or dead-lettered; and a valid event published after it projects.

Hypothesis drives each property from a worker thread; an example runs its requests on
the test's event loop (`OnLoop`), so one stack serves every example of a property. The
two properties get a stack each: the events one writes malformed facts on subjects the
runner reads. The profiles and hostile inputs are tests/support/fuzzing.py's
(tests/properties/test_fuzz_api.py reads the same).

Hostile inputs the properties once found (NUL characters, 3,000-character names) have
their own regression tests below.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from datetime import UTC, datetime

import msgspec
import nats
import pytest
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.bus import commands, contract, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.project.environments import Environment
from jetdbt.shared.runs import graph as gm
from jetdbt.shared.runs.graph import SCOPE_VERSION

from tests.support.events_seen import Events
from tests.support.fuzzing import (
    DIGEST,
    FUZZ,
    ID,
    RUN_BASES,
    OnLoop,
    drive,
    hostile_text,
    json_values,
    mutated,
)
from tests.support.helpers import get_json, wait_for
from tests.support.paths import GOLDEN

# On the bus a failing example costs a wait for an event that never comes; shrinking
# would replay dozens of them, so a failure reports the example as generated.
BUS = settings(FUZZ, phases=[Phase.explicit, Phase.reuse, Phase.generate])


# One NATS subject token: no separator, wildcard or white space (a publish with white
# space in its subject is a protocol error that closes the publisher's connection).
token_chars = st.characters(
    blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp"), blacklist_characters=".*>"
)
project_tokens = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,15}", fullmatch=True),
    st.text(token_chars, min_size=1, max_size=24),
    st.integers(129, 3000).map("p".__mul__),
    # The base32 spelling subjects.token() gives any string: it decodes to anything.
    hostile_text.filter(lambda t: len(t) < 1800).map(
        lambda t: "_" + base64.b32encode(t.encode()).decode().rstrip("=").lower()
    ),
    st.sampled_from(["BadName", "_!!", "_", "-x", "a" * 128, "jaffle_shop"]),
)


class Fresh:
    """Ids no earlier example used: `ID` in a body becomes the next one."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.count = itertools.count()

    def __call__(self, data: bytes) -> bytes:
        return data.replace(ID.encode(), f"{self.prefix}{next(self.count)}".encode())

    def used(self, value: str | None) -> bool:
        """A valid id hypothesis wrote itself: an earlier example may have settled it."""
        return value is not None and not value.startswith(self.prefix)


@pytest.fixture
async def outsider(stack):
    """Another system's NATS connection: a protocol error it causes closes only its own."""
    nc = await nats.connect(stack.nats_url)
    yield nc
    await nc.close()


DEPLOY_BASES = [
    {
        "bundle_digest": DIGEST, "bundle_size": 10, "deploy_id": ID, "requested_by": "ana",
        "skipped": [{"path": "target", "reason": "build output"}],
    }
]  # fmt: skip
BASES = {"run": RUN_BASES, "deploy": DEPLOY_BASES, "cancel": [{"run_id": "r1"}]}


@st.composite
def hostile_commands(draw) -> tuple[str, bytes]:
    verb = draw(st.sampled_from(("run", "run", "run", "deploy", "deploy", "cancel", "")))
    verb = verb or draw(st.text(token_chars, min_size=1, max_size=12))
    body = draw(mutated(BASES.get(verb, RUN_BASES + DEPLOY_BASES)))
    return f"dbt.cmd.{verb}.{draw(project_tokens)}", body


def _decoded(verb: str, body: bytes) -> commands.RunCommand | commands.DeployCommand | None:
    """The command the runner reads from a body, when the body decodes."""
    decode = {
        "run": commands.decode_run,
        "deploy": commands.decode_deploy,
        "cancel": commands.decode_cancel,
    }.get(verb)
    try:
        return decode(body) if decode else None
    except commands.CommandRejected:
        return None


def _plain(subject: str) -> bool:
    """Whether the subject's project token names a valid project."""
    try:
        subjects.check_project(subjects.untoken(subject.split(".")[3]))
    except ValueError:
        return False
    return True


def _body_id(command) -> str | None:
    if isinstance(command, commands.RunCommand):
        return command.run_id
    return command.deploy_id if isinstance(command, commands.DeployCommand) else None


def _refused_id(event: ev.RunRefused | ev.DeployRefused) -> str:
    return event.run_id if isinstance(event, ev.RunRefused) else event.deploy_id


class Commands:
    """Publishes raw commands as another system would, and waits for their refusals."""

    def __init__(self, outsider, events: Events):
        self.js = outsider.jetstream()
        self.events = events

    async def refused(self, subject: str, body: bytes, timeout: float = 10) -> ev.Event | None:
        verb = subject.split(".")[2]
        ack = await self.js.publish(subject, body)
        if verb == "cancel" and _decoded(verb, body) is not None and _plain(subject):
            return None  # a valid cancel is recorded and acted on, nothing to refuse
        ids = {f"c{ack.seq}", _body_id(_decoded(verb, body))}
        return await self.events.first(
            lambda e: isinstance(e, ev.RunRefused | ev.DeployRefused) and _refused_id(e) in ids,
            timeout,
        )


async def test_hostile_commands_are_refused_with_a_reason_and_the_runner_lives(
    stack, outsider, events
):
    run = OnLoop()
    fresh = Fresh("fz")
    sender = Commands(outsider, events)

    @BUS
    @given(hostile_commands())
    def each_is_refused(command):
        subject, body = command
        body = fresh(body)
        decoded = _decoded(subject.split(".")[2], body)
        assume(not fresh.used(_body_id(decoded)))
        event = run(sender.refused(subject, body))
        assert event is None or (isinstance(event.reason, str) and event.reason.strip())
        assert not any(isinstance(e, ev.RunStarted | ev.Deployed) for e in events.seen)

    await drive(each_is_refused)
    later = await sender.refused("dbt.cmd.run.still_alive", b'{"command": {"label": "build"}}')
    assert "has no deployed version" in later.reason
    assert not [t for t in stack._tasks if t.done()]  # runner, watch and projectors run on


@pytest.mark.parametrize(
    "body",
    [
        b'{"command": {"label": "build"}, "%s": 1}' % (b"x" * 3000),
        b'{"command": {"label": "%s"}}' % (b"y" * 3000),
    ],
    ids=["long-unknown-field", "long-label"],
)
def test_a_refusal_quotes_a_prefix_of_a_long_field_name_or_label(body):
    with pytest.raises(commands.CommandRejected) as refused:
        commands.decode_run(body)
    assert len(str(refused.value)) < 400


async def _projected_run(stack, run_id: str, timeout: float = 3) -> dict:
    async def found():
        status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
        return body if status == 200 and body["status"] == "refused" else None

    return await wait_for(found, timeout=timeout)


async def test_a_refusal_for_a_project_token_that_decodes_to_a_nul_is_visible(
    stack, outsider, events
):
    refused = await Commands(outsider, events).refused("dbt.cmd.run._aa", b'{"command": {}}')
    assert (await _projected_run(stack, refused.run_id))["refused_reason"] == refused.reason


async def test_a_run_command_with_a_nul_is_refused_or_recorded_whole(stack, outsider, events):
    body = b'{"command": {"label": "build"}, "requested_by": "a\\u0000b", "run_id": "nul1"}'
    refused = await Commands(outsider, events).refused("dbt.cmd.run.shop", body)
    run = await _projected_run(stack, refused.run_id)
    assert "malformed" in refused.reason or run["command"] == {"label": "build"}


# Which projection folds each event family (streams.yaml).
# The event families a projection folds (FOLDS says which folds read each subject).
FAMILIES = ("run", "node", "deploy", "graph", "relation", "retry", "state")
GOLDENS = {
    family: [json.loads(p.read_text()) for p in sorted(GOLDEN.glob(f"{family}.*.json"))]
    for family in FAMILIES
}
FOLDS = contract.load().projections
SENTINEL = "fz-sentinel"
T0 = datetime(2025, 6, 2, 9, 30, tzinfo=UTC)


def _sentinel(family: str, n: int, graph_digest: str) -> tuple[ev.Event, str, str]:
    """A valid event of `family`, the n-th, and a query that finds the row it makes."""
    key = f"s{n}"
    at = datetime.now(UTC)
    if family == "run":
        event = ev.RunRequested(project=SENTINEL, run_id=key, command={})
        return event, "SELECT 1 FROM runs WHERE run_id = $1", key
    if family == "node":
        event = ev.NodeStarted(project=SENTINEL, run_id=key, attempt=1, unique_id="model.s.m")
        return event, "SELECT 1 FROM run_nodes WHERE run_id = $1", key
    if family == "deploy":
        event = ev.DeployRequested(
            project=SENTINEL, deploy_id=key, bundle_digest=DIGEST, bundle_size=1
        )
        return event, "SELECT 1 FROM deploys WHERE deploy_id = $1", key
    if family == "graph":
        version = digest_of(key.encode())
        event = ev.GraphIngested(
            project=SENTINEL, version=version, scope=SCOPE_VERSION, graph_digest=graph_digest,
            graph_size=1, node_count=1, edge_count=0,
        )  # fmt: skip
        return event, "SELECT 1 FROM graph_versions WHERE version = $1", version
    if family == "relation":
        event = ev.RelationMaterialized(relation="dbt://main/s/t", producer=key, at=at)
        return event, "SELECT 1 FROM relation_writes WHERE producer = $1", key
    if family == "retry":
        event = ev.RetryStateSaved(
            project=SENTINEL, principal=key, run_id=key, attempt=1, run_results_digest=DIGEST,
            version=DIGEST, profile_digest=DIGEST, command={"label": "build"},
        )  # fmt: skip
        return event, "SELECT 1 FROM retry_state WHERE principal = $1", key
    environment = Environment(warehouse="main", target=key, schema="s", database="d")
    event = ev.StatePublished(
        project=SENTINEL, environment=environment, run_id=key, version=DIGEST,
        manifest_digest=DIGEST, manifest_size=1,
    )  # fmt: skip
    return event, "SELECT 1 FROM environments WHERE target = $1", key


@st.composite
def hostile_events(draw) -> tuple[str, str, bytes]:
    """(family, subject, data): a golden event of the family mutated, on the golden's own
    subject or on odd tokens under the family."""
    family = draw(st.sampled_from(FAMILIES))
    golden = draw(st.sampled_from(GOLDENS[family]))
    subject = ev.decode(json.dumps(golden).encode()).subject()
    if draw(st.booleans()):
        tokens = draw(st.lists(project_tokens.filter(lambda t: len(t) < 1000), min_size=1))
        subject = f"dbt.evt.{family}.{'.'.join(tokens[:3])}"
    return family, subject, draw(mutated([golden]))


def _decodes(data: bytes) -> Exception | None:
    try:
        ev.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        return exc
    return None


async def test_hostile_events_are_dead_lettered_and_later_events_project(stack, outsider):
    run = OnLoop()
    js = outsider.jetstream()
    graph = msgspec.json.encode(
        gm.Graph(
            relation_root="dbt://main", default_database=None, edges=[],
            nodes=[gm.GraphNode(unique_id="model.s.m", resource_type="model", name="m")],
        )
    )  # fmt: skip
    graph_digest = await stack.bus.put_blob(graph)
    count = itertools.count()

    async def projected(family: str, subject: str, data: bytes) -> tuple[list, bool]:
        """Publish the hostile event, then a valid one; their dead letters once the
        projection passed both, and whether the valid one's row is there."""
        bad = await js.publish(subject, data)
        event, sql, key = _sentinel(family, next(count), graph_digest)
        good = await stack.bus.publish(event)
        # Each fold that reads the hostile event's subject or the valid one's, and the last
        # of the two it reads: a fold's checkpoint moves only over what it reads.
        reached: dict[str, int] = {}
        for seq, on in ((bad.seq, subject), (good.seq, event.subject())):
            for name, patterns in FOLDS.items():
                if subjects.SubjectFilter(patterns)(on):
                    reached[name] = seq

        async def passed():
            async with stack.pool.acquire() as conn:
                at = dict(
                    await conn.fetch(
                        "SELECT projector, last_seq FROM checkpoints"
                        " WHERE projector = ANY($1::text[])",
                        list(reached),
                    )
                )
                if any(at.get(name, 0) < seq for name, seq in reached.items()):
                    return None
                dead = await conn.fetch(
                    "SELECT projector, error FROM dead_letters"
                    " WHERE stream_seq = ANY($1::bigint[])",
                    [bad.seq, good.seq],
                )
                return [dict(d) for d in dead], await conn.fetchval(sql, key) == 1

        return await wait_for(passed, timeout=20, interval=0.02)

    @BUS
    @given(hostile_events())
    def each_is_dead_lettered_or_applied(hostile):
        family, subject, data = hostile
        dead, valid_projected = run(projected(family, subject, data))
        assert valid_projected, "the valid event after a hostile one did not project"
        problem = _decodes(data)
        on_subject = sorted(
            name for name, patterns in FOLDS.items() if subjects.SubjectFilter(patterns)(subject)
        )
        if problem is not None:  # every fold that reads it (a run's end is freshness' too)
            assert sorted(d["projector"] for d in dead) == on_subject
            assert dead[0]["error"].startswith(type(problem).__name__), dead[0]["error"]
        else:  # decodes: applied, or refused by the fold or by Postgres, never the valid one
            assert {d["projector"] for d in dead} <= set(on_subject)

    await drive(each_is_dead_lettered_or_applied)
    assert not [t for t in stack._tasks if t.done()]
    # The runners' check of declared writes lives on too: a write to no warehouse, sent to
    # the intake as a system's account files it, is refused.
    nowhere = ev.RelationMaterialized(relation="dbt://nowhere/s/t", producer="p", at=T0)
    await stack.bus.js.publish(subjects.intake_write("p", nowhere.relation), ev.encode(nowhere))

    async def refused():
        found = await stack.bus.last_event(subjects.relation_event(nowhere.relation, "refused"))
        return found.reason if found is not None else None

    assert "'nowhere' is not configured" in await wait_for(refused, timeout=20)


async def test_an_event_whose_error_quotes_a_nul_stalls_no_projection(stack):
    await stack.bus.js.publish("dbt.evt.retry.shop.u.saved", b'{"type": "\\u0000"}')
    saved = ev.RetryStateSaved(
        project="shop", principal="u", run_id="r1", attempt=1, run_results_digest=DIGEST,
        version=DIGEST, profile_digest=DIGEST, command={"label": "build"},
    )  # fmt: skip
    await stack.bus.publish(saved)

    async def projected():
        async with stack.pool.acquire() as conn:
            return await conn.fetchval("SELECT run_id FROM retry_state WHERE principal = 'u'")

    assert await wait_for(projected, timeout=3) == "r1"


# ---- the NATS door: nothing but a runner puts a message in the fact stream ---------------

FAMILIES = ("deploy", "graph", "run", "node", "retry", "state", "relation")
fact_subjects = st.builds(
    lambda family, project, rest: ".".join(["dbt.evt", family, project, *rest]),
    st.sampled_from(FAMILIES),
    st.sampled_from(["alpha_shop", "beta_shop", "jaffle_shop"]) | project_tokens,
    st.lists(st.sampled_from(["requested", "deployed", "alice", "saved", "r1", "finished"]),
             min_size=1, max_size=3),
)  # fmt: skip
reply_subjects = st.one_of(
    st.none(),
    fact_subjects,
    st.sampled_from(["dbt.cmd.run.alpha_shop.alice", "dbt.cmd.cancel.alpha_shop.alice.api",
                     "dbt.in.sys_a.relation.x.materialized", "_INBOX_runner.x", "_R_.x.y",
                     "$JS.API.STREAM.INFO.DBT_EVENTS", "dbt.log.r1", "$KV.DBT_IDENTITY.x"]),
)  # fmt: skip
header_names = st.sampled_from(
    ["Nats-Msg-Id", "Jetdbt-Token-Id", "Nats-Expected-Stream", "Nats-Rollup", "Nats-TTL",
     "Nats-Expected-Last-Sequence", "X-Any"]
)  # fmt: skip
header_values = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30)
fuzz_tokens = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,11}", fullmatch=True) | st.sampled_from(
    ["alpha_shop", "beta_shop", "alice", "sys_a", "sys_b", "DBT_EVENTS", "DBT_COMMANDS",
     "runners", "relation_watch", "_mfwgsy3f"]
)  # fmt: skip
payloads = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.sampled_from(sorted(p.name for p in GOLDEN.glob("*.json"))).map(
        lambda name: (GOLDEN / name).read_bytes()
    ),
    st.sampled_from([b'{"batch": 5}', b'{"stream_name": "DBT_EVENTS", "config": {}}',
                     b'{"command": {"label": "build"}}', b'{"run_id": "r1"}']),
)  # fmt: skip


@st.composite
def concrete(draw, pattern: str) -> str:
    """A subject a permission pattern allows: each `*` one token, a final `>` one to three."""
    out = []
    for part in pattern.split("."):
        if part == "*":
            out.append(draw(fuzz_tokens))
        elif part == ">":
            out += draw(st.lists(fuzz_tokens, min_size=1, max_size=3))
        else:
            out.append(part)
    return ".".join(out)


@pytest.fixture
async def door(tmp_path, pg_url):
    """A stack as `jetdbt up` runs it: the generated accounts, two systems of two teams;
    a connection of every user but the runner and the operator, with what it may publish."""
    import uuid

    from jetdbt.services.access import nats_users
    from jetdbt.services.access.local import nats_logins, users_file
    from jetdbt.services.stack.composition import Stack
    from jetdbt.shared.bus.connection import inbox_prefix
    from jetdbt.shared.identity import principals
    from jetdbt.shared.process.config import load

    settings = load(
        {
            "JETDBT_HOME": str(tmp_path / "home"),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
            "EXTERNAL_PUBLISHES_PER_MINUTE": "100000",
        }
    )
    stack = await Stack(settings).start()
    for name, team in (("sys_a", "alpha"), ("sys_b", "beta")):
        nats_users.add_system(settings.home, name, ["*"])
        await principals.put_principal(
            stack.bus,
            principals.Principal(
                name=name, team=team, kind="system", nats_user=name,
                grants=[principals.Grant(role="runner", project="*")],
            ),
        )  # fmt: skip
    assert nats_users.reload_server(settings.home)
    await asyncio.sleep(0.5)
    users = json.loads(users_file(settings.home).read_text())["users"]
    logins = nats_logins(settings.home)
    conns = {}

    async def ignored(exc) -> None:
        """A permission violation or a protocol error is the publisher's own business."""

    for user in ("api", "projector", "sys_a", "sys_b"):
        nc = await nats.connect(
            stack.nats_url,
            user=user,
            password=logins[user],
            inbox_prefix=inbox_prefix(user),
            error_cb=ignored,
            max_reconnect_attempts=-1,
        )
        conns[user] = (nc, nats_users.permissions(user, users[user])["publish"]["allow"])
    yield stack, conns
    for nc, _ in conns.values():
        await nc.close()
    await stack.stop()


async def test_no_publish_but_a_runners_lands_in_the_fact_stream(door):
    """Every user but the runners and the operator publishes on every subject its
    permissions allow, with random reply subjects, headers and payloads: the fact stream
    holds only runners' events (each decodes, is a fact of its subject and carries its
    event id), so no reply, header or payload becomes a fact."""
    from jetdbt.shared.bus.streams import EVENTS

    from tests.support.helpers import not_runners_events

    stack, conns = door
    run = OnLoop()
    js = stack.bus.js
    checked = [(await js.stream_info(EVENTS)).state.last_seq]

    @st.composite
    def publishes(draw):
        user = draw(st.sampled_from(sorted(conns)))
        subject = draw(concrete(draw(st.sampled_from(conns[user][1]))))
        headers = draw(st.dictionaries(header_names, header_values, max_size=3))
        return user, subject, draw(reply_subjects), headers or None, draw(payloads)

    async def publish_and_check(user, subject, reply, headers, data) -> list[str]:
        nc = conns[user][0]
        await nc.publish(subject, data, reply=reply or "", headers=headers)
        await nc.flush()
        await asyncio.sleep(0.05)
        found = await not_runners_events(js, checked[0])
        checked[0] = (await js.stream_info(EVENTS)).state.last_seq
        return found

    @BUS
    @given(publishes())
    def only_runners_write_facts(sent):
        assert run(publish_and_check(*sent)) == [], sent

    await drive(only_runners_write_facts)
    await asyncio.sleep(2)  # what a runner answers late, and any reply the server sends late
    assert await not_runners_events(js, 0) == []
    assert not [t for t in stack._tasks if t.done()]

"""Golden events: committed JSON that every future version of jetdbt must still read.

The files in tests/golden are data, never regenerated: an event once published
stays in DBT_EVENTS forever, so a change that stops one of them decoding (a
renamed field, a changed type, a new field without a default) is a break of the
wire contract. A new event type needs a new golden file before the suite passes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from jetdbt.shared.bus import events as ev

from tests.support.paths import GOLDEN

RUN = "0b7e4c1f9a2d4e8b8c3f5a6d7e8f9012"
DEPLOY = "d5c0a1e2f3b44c5d9e8f7a6b5c4d3e2f"
BUNDLE = "sha256:6f1ed002ab5595859014ebf0951522d9a1b2c3d4e5f60718293a4b5c6d7e8f90"
WARN_TEST = (
    "test.jaffle_shop.accepted_values_orders_status__placed__shipped__completed"
    "__return_pending__returned.be6b5b5ec3"
)


def _tag(kind: type[ev.Event]) -> str:
    return kind.__struct_config__.tag


def _golden_tags() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in GOLDEN.glob("*.json"))


# Per tag: the type it must decode to, and a few values read back through the struct
# (including the subject and the dedup id, which are part of the contract too).
EXPECTED = {
    "deploy.requested.v1": (
        ev.DeployRequested,
        lambda e: (e.deploy_id, e.bundle_digest, e.bundle_size, e.requested_by, e.subject()),
        (DEPLOY, BUNDLE, 18342, "ana", "dbt.evt.deploy.jaffle_shop.requested"),
    ),
    "deploy.refused.v1": (
        ev.DeployRefused,
        lambda e: (e.deploy_id, "$.bundle_size" in e.reason, e.event_id()),
        ("c17", True, "deploy:jaffle_shop:c17:refused"),
    ),
    "deploy.deployed.v1": (
        ev.Deployed,
        lambda e: (
            e.version,
            e.engine,
            e.adapter,
            e.manifest_size,
            "models/marts/orders.sql" in e.files,
            [(s.path, s.reason) for s in e.skipped],
            e.packages_digest is not None,
            e.subject(),
        ),
        (
            BUNDLE,
            "dbt-core-1x",
            "duckdb",
            412877,
            True,
            [("target", "dbt build output"), ("profiles.yml", "may hold secrets")],
            True,
            "dbt.evt.deploy.jaffle_shop.deployed",
        ),
    ),
    "deploy.deployed.v2": (
        ev.Deployed,
        lambda e: (e.files, (e.files_blob.size, e.files_blob.count), e.manifest_size, e.subject()),
        ([], (712400, 30007), 31877412, "dbt.evt.deploy.jaffle_shop.deployed"),
    ),
    "deploy.unchanged.v1": (
        ev.DeployUnchanged,
        lambda e: (e.version, e.event_id()),
        (BUNDLE, "deploy:jaffle_shop:7aa3c9d0e1f24b6c8d9e0f1a2b3c4d5e:unchanged"),
    ),
    "deploy.promoted.v1": (
        ev.Promoted,
        lambda e: (e.slot(), e.version, e.previous[:15], e.deployed_seq, e.subject(), e.event_id()),
        (
            "prod",
            BUNDLE,
            "sha256:0a9b8c7d",
            412,
            "dbt.evt.deploy.jaffle_shop.prod.promoted",
            f"promoted:jaffle_shop:prod:57:{BUNDLE}",
        ),
    ),
    "deploy.failed.v1": (
        ev.DeployFailed,
        lambda e: (e.reason.startswith("dbt parse failed"), e.subject()),
        (True, "dbt.evt.deploy.jaffle_shop.failed"),
    ),
    "run.requested.v1": (
        ev.RunRequested,
        lambda e: (e.run_id, e.command["select"], e.command_seq, e.requested_at, e.hidden),
        (RUN, ["+orders"], 42, datetime(2025, 6, 2, 9, 30, 0, 412000, tzinfo=UTC), False),
    ),
    "run.refused.v1": (
        ev.RunRefused,
        lambda e: (e.run_id, "deploy it first" in e.reason, e.subject()),
        ("c43", True, "dbt.evt.run.jaffle_shop.c43.refused"),
    ),
    "run.started.v1": (
        ev.RunStarted,
        lambda e: (e.attempt, e.version, e.runner, e.event_id()),
        (2, BUNDLE, "runner-a1b2", f"run:jaffle_shop:{RUN}:2:started"),
    ),
    "run.attempt_lost.v1": (
        ev.RunAttemptLost,
        lambda e: (e.attempt, e.event_id()),
        (1, f"run:jaffle_shop:{RUN}:1:attempt_lost"),
    ),
    "run.queued.v1": (
        ev.RunQueued,
        lambda e: (e.attempt, e.reason, e.position, e.team, e.n, e.subject()),
        (
            1,
            "team analytics has 2 of 2 runs",
            3,
            "analytics",
            1,
            f"dbt.evt.run.jaffle_shop.{RUN}.queued",
        ),
    ),
    "run.cancel_requested.v1": (
        ev.RunCancelRequested,
        lambda e: (e.requested_by, e.command_seq, e.event_id()),
        ("analyst@example.com", 44, f"run:jaffle_shop:{RUN}:cancel_requested:44"),
    ),
    "run.catalog.v1": (
        ev.CatalogGenerated,
        lambda e: (
            [(n.unique_id, len(n.columns)) for n in e.nodes],
            (e.nodes[0].columns[3].name, e.nodes[0].columns[3].data_type),
            e.generated_at.second,
            e.subject(),
            e.event_id(),
        ),
        (
            [("model.jaffle_shop.orders", 5), ("source.jaffle_shop.shop.raw_orders", 2)],
            ("status", "VARCHAR"),
            11,
            f"dbt.evt.run.jaffle_shop.{RUN}.catalog",
            f"run:jaffle_shop:{RUN}:1:catalog",
        ),
    ),
    "run.log_kept.v1": (
        ev.RunLogKept,
        lambda e: (e.attempt, e.object, e.lines, e.bytes, e.subject(), e.event_id()),
        (
            2,
            f"log/{RUN}",
            214,
            18830,
            f"dbt.evt.run.jaffle_shop.{RUN}.log_kept",
            f"run:jaffle_shop:{RUN}:2:log_kept",
        ),
    ),
    "run.pruned.v1": (
        ev.RunPruned,
        lambda e: (e.objects[0], len(e.objects), e.kept, e.event_id()),
        (f"log/{RUN}", 2, [], f"run:jaffle_shop:{RUN}:pruned"),
    ),
    "run.finished.v1": (
        ev.RunFinished,
        lambda e: (
            e.result.status,
            e.result.totals["warned"],
            [(n.unique_id, n.outcome, n.rows_affected) for n in e.result.nodes],
            e.result.invocation_args["vars"],
            e.result.nodes[0].finished_at,
            e.subject(),
        ),
        (
            "passed",
            1,
            [("model.jaffle_shop.orders", "passed", 99), (WARN_TEST, "warned", None)],
            {"start_date": "2025-01-01"},
            datetime(2025, 6, 2, 9, 30, 4, 530000, tzinfo=UTC),
            f"dbt.evt.run.jaffle_shop.{RUN}.finished",
        ),
    ),
    "run.finished.v2": (
        ev.RunFinished,
        lambda e: (
            e.result.status,
            e.result.nodes,
            (e.nodes_blob.size, e.nodes_blob.count),
            e.nodes_blob.digest.startswith("sha256:"),
            e.event_id(),
        ),
        ("passed", [], (2411873, 6004), True, f"run:jaffle_shop:{RUN}:1:finished"),
    ),
    "node.started.v1": (
        ev.NodeStarted,
        lambda e: (e.unique_id, e.resource_type, e.relation, e.attempt, e.event_id()),
        (
            "model.jaffle_shop.orders",
            "model",
            '"main"."main"."orders"',
            2,
            f"node:{RUN}:2:0:model.jaffle_shop.orders:started",
        ),
    ),
    "node.finished.v1": (
        ev.NodeFinished,
        lambda e: (e.node.unique_id, e.node.status, e.node.failures, e.subject()),
        (WARN_TEST, "warn", 1, f"dbt.evt.node.jaffle_shop.{RUN}.finished"),
    ),
    "graph.ingested.v1": (
        ev.GraphIngested,
        lambda e: (e.scope, e.run_id, e.node_count, e.principal, e.subject().split(".")[:5]),
        ("version", None, 23, "ana", ["dbt", "evt", "graph", "jaffle_shop", "version"]),
    ),
    # Declared writes come from other systems, which name no project.
    "relation.materialized.v1": (
        ev.RelationMaterialized,
        lambda e: (e.project, e.relation, e.producer, e.row_count, e.subject().split(".")[-1]),
        ("", 'dbt://main/"RAW"/"Events"', "ingest-events", 1200, "materialized"),
    ),
    "relation.refused.v1": (
        ev.RelationRefused,
        lambda e: (e.project, e.write_seq, e.event_id()),
        ("", 118, "relation-refused:118"),
    ),
    "state.published.v1": (
        ev.StatePublished,
        lambda e: (e.environment.key(), e.manifest_size, e.subject().split(".")[:4]),
        (
            "4:main|4:prod|9:analytics|12:dbt_wh_defer",
            622383,
            ["dbt", "evt", "state", "jaffle_shop"],
        ),
    ),
    "job.saved.v1": (
        ev.JobSaved,
        lambda e: (e.name, e.spec["command"]["label"], e.subject(), e.event_id()),
        (
            "nightly",
            "run",
            "dbt.evt.job.jaffle_shop.nightly.saved",
            "job:jaffle_shop:nightly:saved:41",
        ),
    ),
    "job.deleted.v1": (
        ev.JobDeleted,
        lambda e: (e.name, e.deleted_by, e.subject()),
        ("nightly", "ana", "dbt.evt.job.jaffle_shop.nightly.deleted"),
    ),
    "hook.saved.v1": (
        ev.HookSaved,
        lambda e: (e.url, e.on, e.job, e.subject(), e.event_id()),
        (
            "https://hooks.example.com/jetdbt",
            ["failure"],
            "nightly",
            "dbt.evt.hook.jaffle_shop.pager.saved",
            "hook-saved:jaffle_shop:pager:5f0c2a",
        ),
    ),
    "hook.removed.v1": (
        ev.HookRemoved,
        lambda e: (e.name, e.removed_by, e.subject()),
        ("pager", "ana", "dbt.evt.hook.jaffle_shop.pager.removed"),
    ),
    "hook.delivery.v1": (
        ev.HookDelivered,
        lambda e: (e.attempt, e.status, e.state, e.subject(), e.event_id()),
        (
            2,
            500,
            "retrying",
            "dbt.evt.hook.jaffle_shop.pager.delivery",
            "hook-delivery:d41d8cd98f00b204:2",
        ),
    ),
    "job.refused.v1": (
        ev.JobRefused,
        lambda e: (e.action, "2.14" in e.reason, e.subject(), e.event_id()),
        ("schedule", True, "dbt.evt.job.jaffle_shop.refused", "job-refused:jaffle_shop:45"),
    ),
    "schedule.saved.v1": (
        ev.ScheduleSaved,
        lambda e: (e.job, e.state, e.cron, e.tz, e.subject()),
        (
            "nightly",
            "active",
            "0 0 6 * * *",
            "Europe/Paris",
            "dbt.evt.schedule.jaffle_shop.nightly.saved",
        ),
    ),
    "schedule.fired.v1": (
        ev.ScheduleFired,
        lambda e: (e.run_id, e.next_at.day, e.subject(), e.event_id()),
        ("c57", 5, "dbt.evt.schedule.jaffle_shop.nightly.fired", "schedule-fired:jaffle_shop:57"),
    ),
    "schedule.coalesced.v1": (
        ev.ScheduleCoalesced,
        lambda e: (e.job, e.run_id, e.next_at.minute, e.subject(), e.event_id()),
        (
            "hourly",
            "c61",
            1,
            "dbt.evt.schedule.jaffle_shop.hourly.coalesced",
            "schedule-coalesced:jaffle_shop:64",
        ),
    ),
    "retry.saved.v1": (
        ev.RetryStateSaved,
        lambda e: (e.principal, e.command["vars"], e.args, e.subject().split(".")[:4]),
        (
            "analyst@example.com",
            {"break_payments": True},
            {"run_date": "2026-11-29"},
            ["dbt", "evt", "retry", "jaffle_shop"],
        ),
    ),
}


def test_every_event_type_has_a_golden_file():
    missing = sorted({_tag(kind) for kind in ev.EVENT_TYPES} - set(_golden_tags()))
    assert not missing, f"add a golden file to tests/golden for: {missing}"


def test_every_golden_file_is_checked():
    assert sorted(EXPECTED) == _golden_tags()


@pytest.mark.parametrize("tag", _golden_tags())
def test_golden_decodes(tag):
    kind, read, values = EXPECTED[tag]
    event = ev.decode((GOLDEN / f"{tag}.json").read_bytes())
    assert type(event) is kind
    assert event.project == ("" if tag.startswith("relation.") else "jaffle_shop")
    assert event.at.tzinfo is not None and event.at.year == 2025
    assert read(event) == values


def _as_old_reader_sees_it(encoded, golden):
    """`encoded` cut down to the keys `golden` has, recursively.

    A field added later (always with a default) appears in the re-encoding but
    not in an old file; everything the file holds must come back exactly.
    """
    if isinstance(golden, dict) and isinstance(encoded, dict):
        return {k: _as_old_reader_sees_it(encoded[k], golden[k]) for k in golden if k in encoded}
    if isinstance(golden, list) and isinstance(encoded, list) and len(golden) == len(encoded):
        return [_as_old_reader_sees_it(e, g) for e, g in zip(encoded, golden, strict=True)]
    return encoded


@pytest.mark.parametrize("tag", _golden_tags())
def test_golden_reencodes_unchanged(tag):
    """Every field survives decode and encode: nothing is dropped, renamed or reformatted."""
    raw = (GOLDEN / f"{tag}.json").read_bytes()
    golden = json.loads(raw)
    encoded = json.loads(ev.encode(ev.decode(raw)))
    if tag in _SUPERSEDED_TAGS:  # upcast: it comes back as the current version
        assert encoded.pop("type") == _tag(EXPECTED[tag][0])
        golden.pop("type")
    assert _as_old_reader_sees_it(encoded, golden) == golden


_SUPERSEDED_TAGS = {_tag(kind) for kind in ev.SUPERSEDED}


def test_every_superseded_version_has_a_golden_file_and_is_upcast():
    """An old version is read as its current type, so no reader handles two."""
    assert set(_golden_tags()) >= _SUPERSEDED_TAGS
    current = {_tag(kind) for kind in ev.EVENT_TYPES}
    assert not _SUPERSEDED_TAGS & current

"""The graph against real NATS, Postgres and dbt: deploy ingest, relations shared across
projects, declared writes from plain NATS publishes, run snapshots, retention, columns."""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from datetime import UTC, datetime, timedelta

import msgspec
import nats
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jetdbt.projections.graph.fold import PARSE_GRAPHS_KEPT, VERSIONS_KEPT
from jetdbt.services.cli import client
from jetdbt.services.runner import graph
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.setup import job_setup as setup
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand
from jetdbt.shared.identity import principals

from tests.support.graph_reads import project_graph
from tests.support.helpers import deploy_and_wait, get_json, jetdbt, wait_for
from tests.support.paths import EXAMPLE

P = "jaffle_shop"
M, S, T = f"model.{P}.", f"seed.{P}.", f"test.{P}."
NODES = {
    M + "customers": "dbt://main/jaffle_shop/customers",
    M + "orders": "dbt://main/jaffle_shop/orders",
    M + "stg_customers": "dbt://main/jaffle_shop/stg_customers",
    M + "stg_orders": "dbt://main/jaffle_shop/stg_orders",
    M + "stg_payments": "dbt://main/jaffle_shop/stg_payments",
    S + "raw_customers": "dbt://main/jaffle_shop/raw_customers",
    S + "raw_orders": "dbt://main/jaffle_shop/raw_orders",
    S + "raw_payments": "dbt://main/jaffle_shop/raw_payments",
    T + "accepted_values_orders_status__placed__shipped__completed.1859fef9bd": None,
    T + "accepted_values_stg_orders_status__placed__shipped__completed__return_pending"
    "__returned.080fb20aad": None,
    T + "assert_positive_order_total": None,
    T + "not_null_customers_customer_id.5c9bf9911d": None,
    T + "not_null_orders_customer_id.c5f02694af": None,
    T + "not_null_orders_order_id.cf6c17daed": None,
    T + "not_null_stg_customers_customer_id.e2cfb1f9aa": None,
    T + "not_null_stg_orders_order_id.81cfe2fe64": None,
    T + "not_null_stg_payments_payment_id.c19cc50075": None,
    T + "relationships_orders_customer_id__customer_id__ref_customers_.c6ec7f58f2": None,
    T + "unique_customers_customer_id.c5af1ff4b1": None,
    T + "unique_orders_order_id.fed79b3a6e": None,
    T + "unique_stg_customers_customer_id.c7614daada": None,
    T + "unique_stg_orders_order_id.e3b841c71a": None,
    T + "unique_stg_payments_payment_id.3744510712": None,
}
_TESTED = {  # model -> the tests hanging off it
    "customers": ["not_null_customers_customer_id.5c9bf9911d",
                  "unique_customers_customer_id.c5af1ff4b1",
                  "relationships_orders_customer_id__customer_id__ref_customers_.c6ec7f58f2"],
    "orders": ["accepted_values_orders_status__placed__shipped__completed.1859fef9bd",
               "assert_positive_order_total", "not_null_orders_customer_id.c5f02694af",
               "not_null_orders_order_id.cf6c17daed", "unique_orders_order_id.fed79b3a6e",
               "relationships_orders_customer_id__customer_id__ref_customers_.c6ec7f58f2"],
    "stg_customers": ["not_null_stg_customers_customer_id.e2cfb1f9aa",
                      "unique_stg_customers_customer_id.c7614daada"],
    "stg_orders": ["accepted_values_stg_orders_status__placed__shipped__completed__return_pending"
                   "__returned.080fb20aad", "not_null_stg_orders_order_id.81cfe2fe64",
                   "unique_stg_orders_order_id.e3b841c71a"],
    "stg_payments": ["not_null_stg_payments_payment_id.c19cc50075",
                     "unique_stg_payments_payment_id.3744510712"],
}  # fmt: skip
EDGES = {
    (S + "raw_customers", M + "stg_customers", "ref"),
    (S + "raw_orders", M + "stg_orders", "ref"),
    (S + "raw_payments", M + "stg_payments", "ref"),
    (M + "stg_orders", M + "orders", "ref"),
    (M + "stg_payments", M + "orders", "ref"),
    (M + "stg_customers", M + "customers", "ref"),
    (M + "orders", M + "customers", "ref"),
} | {(M + model, T + test, "ref") for model, tests in _TESTED.items() for test in tests}


async def _deploy(stack, path, project) -> ev.Deployed:
    final = await deploy_and_wait(stack.bus, path, project)
    return final


def _relation_url(stack, key: str) -> str:
    return f"{stack.api_url}/v1/relations/{urllib.parse.quote(key, safe='')}"


@pytest.mark.dbt
async def test_example_graph_is_exact(stack):
    deployed = await _deploy(stack, EXAMPLE, P)
    body = await project_graph(stack, P)
    assert body["version"] == deployed.version and body["run_id"] is None
    assert body["scope"] == "version" and body["relation_root"] == "dbt://main"
    nodes = {n["unique_id"]: n for n in body["nodes"]}
    assert {uid: n["relation"] for uid, n in nodes.items()} == NODES
    assert {(e["parent"], e["child"], e["kind"]) for e in body["edges"]} == EDGES
    assert len(body["edges"]) == len(EDGES) == 23
    orders = nodes[M + "orders"]
    assert orders["materialized"] == "table" and orders["owned"] is True
    assert orders["description"].startswith("One row per order")
    assert [c["name"] for c in orders["columns"]] == ["order_id", "customer_id", "status"]
    assert "ref('stg_payments')" in orders["raw_code"]
    assert nodes[M + "stg_orders"]["materialized"] == "view"
    warn = nodes[T + "accepted_values_orders_status__placed__shipped__completed.1859fef9bd"]
    assert (warn["test_kind"], warn["test_severity"]) == ("accepted_values", "warn")
    assert warn["attached_node"] == M + "orders"
    singular = nodes[T + "assert_positive_order_total"]
    assert (singular["test_kind"], singular["test_severity"]) == ("singular", "error")
    # Where the viewer draws each model and seed: its generation, then its place in it.
    # customers reads orders: a column to its right.
    placed = {uid.split(".")[-1]: (n["layer"], n["row"]) for uid, n in nodes.items()}
    assert {name: at for name, at in placed.items() if at[0] is not None} == {
        "raw_customers": (0, 0), "raw_orders": (0, 1), "raw_payments": (0, 2),
        "stg_customers": (1, 0), "stg_orders": (1, 1), "stg_payments": (1, 2),
        "orders": (2, 0), "customers": (3, 0),
    }  # fmt: skip
    assert singular["layer"] is None and singular["row"] is None
    # The graph event precedes Deployed, so a deployed version always has its graph.
    graph_event = await stack.bus.last_event(subjects.graph_event(P, "version", deployed.version))
    assert graph_event.at <= deployed.at and graph_event.node_count == len(NODES)
    # The relation view of one model: produced by jaffle_shop, read by customers.
    status, rel = await get_json(_relation_url(stack, 'dbt://main/"JAFFLE_SHOP"/"Orders"'))
    assert status == 200 and rel["relation"] == "dbt://main/jaffle_shop/orders"
    assert rel["producers"] == [{"kind": "dbt", "project": P, "unique_id": M + "orders"}]
    assert M + "customers" in {r["unique_id"] for r in rel["readers"]}
    # Anyone who may read a project that writes or reads it may read the relation's page;
    # a token of another team may not, and is not told which projects those are.
    deployer = await stack.pool.fetchval("SELECT team FROM deploys WHERE project = $1", P)
    url = _relation_url(stack, "dbt://main/jaffle_shop/orders")
    for team, expected in ((deployer, 200), ("elsewhere", 403)):
        _, bearer = await principals.create_token(
            stack.bus, principal=f"reader-{team}", team=team, role="viewer"
        )
        status, body = await get_json(url, bearer)
        assert status == expected, body
    # The key names the project's schema: it is what the token asked for, no more.
    told = body["error"].replace("dbt://main/jaffle_shop/orders", "")
    assert P not in told and "no project" in told


REPORTS = {
    "dbt_project.yml": "name: shop_reports\nversion: '1.0.0'\nconfig-version: 2\n"
    "profile: shop_reports\n",
    # The mart jaffle_shop builds, spelled in another case, and a table only an
    # ingestion job writes.
    "models/sources.yml": "version: 2\nsources:\n"
    "  - name: jaffle\n    schema: JAFFLE_SHOP\n    tables:\n      - name: orders\n"
    "        identifier: ORDERS\n"
    "  - name: raw\n    schema: raw\n    tables:\n      - name: events\n",
    "models/order_counts.sql": "select customer_id, count(*) as n"
    " from {{ source('jaffle', 'orders') }} group by 1\n",
    "models/event_counts.sql": "select count(*) as n from {{ source('raw', 'events') }}\n",
}


def _write(root, files: dict[str, str]):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _declared_write(key: str, producer: str, rows: int, at: datetime) -> tuple[str, bytes]:
    """Subject and body exactly as another system builds them: no jetdbt code."""
    tok = "_" + base64.b32encode(key.encode()).decode().rstrip("=").lower()
    body = {
        "type": "relation.materialized.v1",
        "relation": key,
        "producer": producer,
        "status": "success",
        "row_count": rows,
        "at": at.isoformat(),
    }
    return f"dbt.evt.relation.{tok}.materialized", json.dumps(body).encode()


@pytest.mark.dbt
async def test_two_projects_and_a_declared_write_share_one_node(stack, tmp_path):
    await _deploy(stack, EXAMPLE, P)
    await _deploy(stack, _write(tmp_path / "reports", REPORTS), "shop_reports")
    reports = await project_graph(stack, "shop_reports")
    by_id = {n["unique_id"]: n for n in reports["nodes"]}
    assert by_id["source.shop_reports.jaffle.orders"]["relation"] == "dbt://main/jaffle_shop/orders"
    assert by_id["source.shop_reports.raw.events"]["relation"] == "dbt://main/raw/events"
    assert {(e["parent"], e["child"], e["kind"]) for e in reports["edges"]} == {
        ("source.shop_reports.jaffle.orders", "model.shop_reports.order_counts", "source"),
        ("source.shop_reports.raw.events", "model.shop_reports.event_counts", "source"),
    }
    await project_graph(stack, P)
    status, rel = await get_json(_relation_url(stack, "dbt://main/jaffle_shop/orders"))
    assert status == 200
    assert {(n["project"], n["unique_id"]) for n in rel["nodes"]} == {
        (P, M + "orders"),
        ("shop_reports", "source.shop_reports.jaffle.orders"),
    }
    assert rel["producers"] == [{"kind": "dbt", "project": P, "unique_id": M + "orders"}]
    readers = {(r["project"], r["unique_id"]) for r in rel["readers"]}
    assert {(P, M + "customers"), ("shop_reports", "model.shop_reports.order_counts")} <= readers

    # An ingestion job declares its write with a plain NATS publish, in its own spelling.
    nc = await nats.connect(stack.nats_url)
    try:
        at = datetime(2025, 6, 2, 9, 12, tzinfo=UTC)
        await nc.publish(*_declared_write('dbt://main/"RAW"/Events', "ingest-events", 42, at))
        await nc.flush()
    finally:
        await nc.close()

    async def landed():
        body = await project_graph(stack, "shop_reports")
        node = next(n for n in body["nodes"] if n["unique_id"] == "source.shop_reports.raw.events")
        return node["declared_writes"]

    writes = await wait_for(landed)
    assert writes[0]["producer"] == "ingest-events" and writes[0]["row_count"] == 42
    status, rel = await get_json(_relation_url(stack, "dbt://main/raw/events"))
    assert [(p["kind"], p.get("producer")) for p in rel["producers"]] == [
        ("declared", "ingest-events")
    ]
    assert [r["unique_id"] for r in rel["readers"]] == ["model.shop_reports.event_counts"]


async def test_write_to_unknown_warehouse_is_refused(stack):
    """A system's write reaches the intake under its principal (its NATS account files it
    there); a runner records it as a fact, or refuses it with the reason and records
    nothing of it on the relation."""
    refused: list[ev.RelationRefused] = []

    async def collect(msg) -> None:
        refused.append(ev.decode(msg.data))

    async def both() -> bool:
        return len(refused) >= 2

    def intake(subject: str) -> str:
        return subject.replace("dbt.evt.relation.", "dbt.in.ingest.relation.", 1)

    sub = await stack.bus.nc.subscribe("dbt.evt.relation.*.refused", cb=collect)
    nc = await nats.connect(stack.nats_url)
    try:
        at = datetime(2025, 6, 2, 9, 12, tzinfo=UTC)
        lake, body = _declared_write("dbt://lake/raw/events", "ingest", 7, at)
        await nc.publish(intake(lake), body)
        await nc.publish("dbt.in.ingest.relation.x.materialized", b'{"relation": "dbt://main/a/b"}')
        main, body = _declared_write("dbt://main/raw/events", "ingest", 8, at)
        await nc.publish(intake(main), body)
        await nc.flush()
        await wait_for(both)
    finally:
        await nc.close()
        await sub.unsubscribe()
    assert "warehouse 'lake' is not configured; configured: main" in refused[0].reason
    assert refused[0].relation == "dbt://lake/raw/events" and refused[0].publisher == "ingest"
    assert refused[1].reason.startswith("not a declared write")

    async def recorded():
        status, rel = await get_json(_relation_url(stack, "dbt://main/raw/events"))
        return rel if status == 200 and rel["writes"] else None  # 404 until it is folded

    ok = await wait_for(recorded)
    assert [(w["producer"], w["refused_reason"]) for w in ok["writes"]] == [("ingest", None)]
    status, rel = await get_json(_relation_url(stack, "dbt://lake/raw/events"))
    assert status == 404, rel  # a refused write claims nothing: the relation is unknown
    assert rel["error"].startswith("relation 'dbt://lake/raw/events' is not known")


BIG_ORDERS = (
    "{{ config(enabled=var('enable_big_orders', false)) }}\n"
    "select * from {{ ref('orders') }} where amount > 10\n"
)


@pytest.mark.dbt
async def test_run_graph_snapshot_only_when_it_differs(stack, project_copy):
    (project_copy / "models" / "marts" / "big_orders.sql").write_text(BIG_ORDERS)
    deployed = await _deploy(stack, project_copy, P)
    version_graph = await project_graph(stack, P)
    assert M + "big_orders" not in {n["unique_id"] for n in version_graph["nodes"]}
    ctx = RunnerContext(bus=stack.bus, settings=stack.settings)

    async def refresh(run_id: str, cmd: BuildCommand):
        prepared = await setup.prepare(
            ctx, deployed.version, run_id, project=P, team="default", cmd=cmd
        )
        try:
            return await graph.refresh_run_graph(
                ctx, prepared, P, deployed.version, run_id, cmd, principal="ana"
            )
        finally:
            prepared.job.cleanup()

    # The var enables a model: the run's own graph has it, before anything is built.
    enabled = await refresh("run-enabled", BuildCommand(vars={"enable_big_orders": True}))
    assert enabled is not None and enabled.scope == "run" and enabled.node_count == 24

    async def run_graph():
        status, body = await get_json(f"{stack.api_url}/v1/runs/run-enabled/graph")
        return body if status == 200 else None

    body = await wait_for(run_graph)
    assert body["fallback"] is False and body["version"] == deployed.version
    big = next(n for n in body["nodes"] if n["unique_id"] == M + "big_orders")
    assert big["relation"] == "dbt://main/jaffle_shop/big_orders"
    assert (M + "orders", M + "big_orders", "ref") in {
        (e["parent"], e["child"], e["kind"]) for e in body["edges"]
    }
    # Vars that change nothing store nothing; the run reads the version's graph back.
    same = await refresh("run-same", BuildCommand(vars={"enable_big_orders": False}))
    assert same is None
    assert await refresh("run-plain", BuildCommand()) is None  # no cause to re-ingest
    await stack.bus.publish(
        ev.RunStarted(project=P, run_id="run-same", attempt=1, version=deployed.version)
    )

    async def fallback():
        status, body = await get_json(f"{stack.api_url}/v1/runs/run-same/graph")
        return body if status == 200 else None

    body = await wait_for(fallback)
    assert body["fallback"] is True and body["run_id"] == "run-same"
    assert body["content_digest"] == version_graph["content_digest"]


@pytest.mark.dbt
async def test_a_placeholder_var_that_enables_a_model_shows_in_that_runs_graph(stack, project_copy):
    """A real run: its graph is stored before its build starts, with the model it enables."""
    from jetdbt.shared.bus.commands import RunCommand
    from jetdbt.shared.bus.subjects import graph_event, node_event

    (project_copy / "models" / "marts" / "big_orders.sql").write_text(BIG_ORDERS)
    (project_copy / "jetdbt.yaml").write_text("vars:\n  enable_big_orders: '{{ big }}'\n")
    await _deploy(stack, project_copy, P)
    on = await client.run(stack.bus, P, RunCommand(command=BuildCommand(), args={"big": True}))
    assert on.result.status == "passed", on.result.error
    assert M + "big_orders" in {n.unique_id for n in on.result.nodes}
    graph_msg = await stack.bus.js.get_last_msg("DBT_EVENTS", graph_event(P, "run", on.run_id))
    first_node = await stack.bus.js.get_msg(
        "DBT_EVENTS", seq=1, subject=node_event(P, on.run_id, "started"), next=True
    )
    assert graph_msg.seq < first_node.seq  # written before the build, not after

    async def run_graph():
        status, body = await get_json(f"{stack.api_url}/v1/runs/{on.run_id}/graph")
        return body if status == 200 else None

    body = await wait_for(run_graph)
    assert body["fallback"] is False
    assert M + "big_orders" in {n["unique_id"] for n in body["nodes"]}
    off = await client.run(stack.bus, P, RunCommand(command=BuildCommand(), args={"big": False}))
    assert off.result.status == "passed"
    no_snapshot = await stack.bus.last_event(graph_event(P, "run", off.run_id))
    assert no_snapshot is None  # a dynamic run whose graph matches the version's stores none


@pytest.mark.dbt
async def test_descriptor_selection_is_what_the_project_owns(stack, project_copy):
    (project_copy / "jetdbt.yaml").write_text("select: ['+orders']\nexclude: ['stg_payments']\n")
    await _deploy(stack, project_copy, P)
    body = await project_graph(stack, P)
    owned = {n["unique_id"] for n in body["nodes"] if n["owned"]}
    assert {M + "orders", M + "stg_orders", S + "raw_orders", S + "raw_payments"} <= owned
    assert not {M + "customers", M + "stg_payments", M + "stg_customers"} & owned
    assert len(body["nodes"]) == len(NODES)  # the graph is whole; the claim is narrowed
    status, rel = await get_json(_relation_url(stack, "dbt://main/jaffle_shop/customers"))
    assert rel["producers"] == [] and [n["unique_id"] for n in rel["nodes"]] == [M + "customers"]


def _manifest(models: list[str]) -> dict:
    """A minimal manifest.json: the shape dbt writes, with only the keys the graph reads."""
    nodes = {
        f"model.p.{m}": {
            "unique_id": f"model.p.{m}",
            "resource_type": "model",
            "name": m,
            "database": "main",
            "schema": "main",
            "alias": m,
            "relation_name": f'"main"."main"."{m}"',
            "config": {"materialized": "table"},
            "depends_on": {"nodes": []},
        }
        for m in models
    }
    return {"nodes": nodes, "sources": {}, "exposures": {}}


async def test_retention_is_pruned_by_the_fold(stack):
    ctx = RunnerContext(bus=stack.bus, settings=stack.settings)
    for i in range(VERSIONS_KEPT + 2):
        await graph.publish_graph(ctx, "p", f"v{i:03d}", _manifest([f"m{i}"]), "main")
    for i in range(PARSE_GRAPHS_KEPT + 2):
        await graph.publish_graph(
            ctx, "p", "", _manifest([f"e{i}"]), "main", run_id=f"parse-ana-{i}", principal="ana"
        )
    await graph.publish_graph(
        ctx, "p", "", _manifest(["x"]), "main", run_id="parse-bo", principal="bo"
    )
    # A run snapshot from 31 days ago (the stream keeps its original time).
    blob = msgspec.json.encode(graph.build_graph(_manifest(["old"]), "main", "main"))
    old = ev.GraphIngested(
        project="p",
        version="v051",
        run_id="old-run",
        scope="run",
        graph_digest=await stack.bus.put_blob(blob),
        graph_size=len(blob),
        node_count=1,
        edge_count=0,
        at=datetime.now(UTC) - timedelta(days=31),
    )
    await stack.bus.publish(old)
    await graph.publish_graph(
        ctx, "p", "v051", _manifest(["m51", "new"]), "main", run_id="new-run", base_digest="-"
    )

    async def rows():
        async with stack.pool.acquire() as conn:
            seen = await conn.fetch("SELECT version, run_id, scope FROM graph_versions")
        got = {(r["scope"], r["version"] or r["run_id"]) for r in seen}
        return got if ("run", "v051") in got and ("version", "v051") in got else None

    got = await wait_for(rows)
    versions = sorted(v for s, v in got if s == "version")
    assert versions == [f"v{i:03d}" for i in range(2, VERSIONS_KEPT + 2)]
    async with stack.pool.acquire() as conn:
        runs = await conn.fetch(
            "SELECT run_id, principal FROM graph_versions WHERE scope <> 'version'"
        )
        orphans = await conn.fetchval(
            "SELECT count(*) FROM graph_nodes n WHERE NOT EXISTS (SELECT 1 FROM graph_versions g"
            " WHERE (g.project, g.version, g.run_id) = (n.project, n.version, n.run_id))"
        )
    assert {r["run_id"] for r in runs} == {
        "new-run",
        "parse-bo",
        *(f"parse-ana-{i}" for i in range(2, PARSE_GRAPHS_KEPT + 2)),
    }
    assert orphans == 0


def _index(tmp_path):
    """The engine's index in its documented schema (Decision 14)."""
    index = tmp_path / "index"
    index.mkdir()
    lineage = pa.table({
        "from_node_unique_id": [M + "stg_orders", M + "stg_orders", M + "stg_payments",
                                M + "stg_orders", M + "orders"],
        "from_column_name": ["order_id", "status", "amount", "order_id", "amount"],
        "to_node_unique_id": [M + "orders", M + "orders", M + "orders", M + "orders",
                              M + "customers"],
        "to_column_name": ["order_id", "status", "amount", "amount", "customer_lifetime_value"],
        "lineage_kind": ["copy", "copy", "mod", "scan", "mod"],
    })  # fmt: skip
    pq.write_table(lineage, index / graph.LINEAGE_FILE)
    columns = pa.table({
        "unique_id": [M + "orders"] * 3,
        "column_name": ["status", "order_id", "amount"],
        "column_index": [2, 0, 1],
        "declared_type": [None, "integer", None],
        "inferred_type": ["Utf8", "Int32", "Float64"],
        "description": ["", "One row per order", ""],
    })  # fmt: skip
    pq.write_table(columns, index / graph.COLUMNS_FILE)
    return index


@pytest.mark.dbt
async def test_column_lineage_from_the_engine_index(stack, tmp_path, project_copy):
    index = _index(tmp_path)
    found = graph.read_column_index(index)
    assert len(found.edges) == 5 and found.notes == []
    assert [c.name for c in found.schemas[M + "orders"]] == ["order_id", "amount", "status"]
    bounded = graph.read_column_index(index, bound=3)
    assert sorted(e.lineage_kind for e in bounded.edges) == ["copy", "copy", "mod"]
    assert "kept 3 of 5" in bounded.notes[0]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / graph.LINEAGE_FILE).write_bytes(b"not parquet")
    broken = graph.read_column_index(tmp_path / "broken")
    assert broken.edges == [] and any("unreadable" in n for n in broken.notes)

    # dbt-core 1.x has no --write-index: the log says so and nothing fails.
    (project_copy / "jetdbt.yaml").write_text("column_lineage: true\n")
    deployed = await _deploy(stack, project_copy, P)
    ctx = RunnerContext(bus=stack.bus, settings=stack.settings)
    prepared = await setup.prepare(ctx, deployed.version, "columns", project=P, team="default")
    lines: list[str] = []

    async def on_line(line: str) -> None:
        lines.append(line)

    try:
        assert await graph.column_index(prepared, on_line, None) is None
    finally:
        prepared.job.cleanup()
    assert lines == [graph.NO_INDEX_NOTE]

    # An index the engine wrote lands as column edges and a typed schema per node.
    manifest = msgspec.json.decode(await stack.bus.get_blob(deployed.manifest_digest))
    await graph.publish_graph(
        ctx, P, deployed.version, manifest, "main", run_id="with-columns", columns=found
    )

    async def stored():
        status, body = await get_json(f"{stack.api_url}/v1/runs/with-columns/graph")
        return body if status == 200 else None

    body = await wait_for(stored)
    assert len(body["column_edges"]) == 5
    assert {c["lineage_kind"] for c in body["column_edges"]} == {"copy", "mod", "scan"}
    orders = next(n for n in body["nodes"] if n["unique_id"] == M + "orders")
    assert [(c["name"], c["inferred_type"]) for c in orders["column_schema"]] == [
        ("order_id", "Int32"),
        ("amount", "Float64"),
        ("status", "Utf8"),
    ]
    assert [c["name"] for c in orders["columns"]] == ["order_id", "customer_id", "status"]


@pytest.mark.dbt
async def test_a_parse_of_an_undeployed_bundle_is_keyed_by_its_own_run(stack, project_copy):
    """The editor's refresh: the project as it is on disk, never deployed, never built."""
    await _deploy(stack, project_copy, P)
    (project_copy / "models" / "marts" / "draft.sql").write_text(
        "select * from {{ ref('orders') }}\n"
    )
    out = await jetdbt(stack, "parse", str(project_copy), "--project", P)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split(", run ")[1].split(":")[0]
    # What dbt parsed, summed up where it is read: the draft is a new leaf of the graph.
    (leaves,) = [line for line in out.stdout.splitlines() if line.startswith("  leaves (")]
    assert "draft" in leaves.split(": ", 1)[1].split(", "), out.stdout
    assert re.search(r"^  \d+ nodes: \d+ tests, \d+ models, 3 seeds$", out.stdout, re.M), out.stdout

    async def parsed():
        status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}/graph")
        return body if status == 200 else None

    body = await wait_for(parsed)
    assert M + "draft" in {n["unique_id"] for n in body["nodes"]}
    deployed_graph = await project_graph(stack, P)
    assert M + "draft" not in {n["unique_id"] for n in deployed_graph["nodes"]}
    event = await stack.bus.last_event(subjects.graph_event(P, "parse", run_id))
    assert event.scope == "parse" and event.version == ""

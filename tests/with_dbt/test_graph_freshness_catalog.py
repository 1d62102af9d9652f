"""What the warehouse says of a project's graph, served on it: a source's last freshness check
(`source freshness`) and each node's columns with the warehouse's types (`docs generate`),
on a real stack with real dbt on DuckDB, read from the API and seen in the viewer (Debian's
headless Chromium, as tests/with_dbt/test_viewer.py); and hostile catalogs and sources files, which
never break a run or a fold."""

from __future__ import annotations

import json
import re

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.runner.after import catalog, results
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import RunCommand, dbt_command
from jetdbt.shared.identity import principals
from playwright.async_api import TimeoutError as PlaywrightTimeout
from playwright.async_api import async_playwright

from tests.support.helpers import deploy_and_wait, get_json, jetdbt
from tests.support.recorded_log import settled
from tests.support.stale_source import SOURCE, add_stale_source
from tests.support.viewer import ARTIFACTS, browser, go_to, sign_in

ORDERS = "model.jaffle_shop.orders"
YEAR = 365 * 24 * 3600


async def _run(stack, name: str) -> ev.Event:
    return await client.run(stack.bus, "shop", RunCommand(command=dbt_command(name)), timeout=600)


async def _nodes(stack) -> dict[str, dict]:
    """The project graph's nodes, once every projection has folded what is in the log."""
    await settled(stack)
    status, graph = await get_json(f"{stack.api_url}/v1/projects/shop/graph")
    assert status == 200, graph
    return {n["unique_id"]: n for n in graph["nodes"]}


@pytest.mark.dbt
async def test_a_stale_source_warns_on_the_graph_and_columns_carry_warehouse_types(
    stack, project_copy
):
    add_stale_source(project_copy)
    await deploy_and_wait(stack.bus, project_copy, "shop")
    built = await _run(stack, "build")
    assert built.result.status == "passed", built.result.error

    nodes = await _nodes(stack)
    assert nodes[SOURCE]["freshness"] is None and nodes[ORDERS]["catalog"] is None

    # The way a person asks for it: the console script.
    done = await jetdbt(stack, "run", "shop", "--command", "source freshness")
    assert done.returncode == 0, done.stderr
    assert re.search(r", \d+y ago \(warn after 1 day", done.stdout), done.stdout  # not 2e8s
    await settled(stack)
    async with stack.pool.acquire() as conn:
        checked = await conn.fetchval(
            "SELECT run_id FROM runs WHERE project = 'shop'"
            " AND command->>'label' = 'source_freshness'"
        )
    nodes = await _nodes(stack)
    f = nodes[SOURCE]["freshness"]
    assert (f["status"], f["outcome"]) == ("warn", "warned"), f
    assert f["max_loaded_at"].startswith("2018-")
    assert f["age_seconds"] > 5 * YEAR
    assert f["warn_after"] == {"count": 1, "period": "day"}
    assert f["error_after"] == {"count": 36500, "period": "day"}
    assert f["snapshotted_at"] > f["max_loaded_at"] and f["run_id"] == checked
    assert "warn after 1 day" in f["message"]
    assert nodes[ORDERS]["freshness"] is None  # a model has no freshness

    docs = await _run(stack, "docs generate")
    assert docs.result.status == "passed", docs.result.error
    nodes = await _nodes(stack)
    cat = nodes[ORDERS]["catalog"]
    assert cat["run_id"] == docs.run_id
    types = {c["name"]: c["data_type"] for c in cat["columns"]}
    assert types["order_id"] == "INTEGER" and types["status"] == "VARCHAR", types
    assert [c["name"] for c in cat["columns"]][0] == "order_id"  # the warehouse's order
    # A source is in the catalog too, and keeps its freshness beside its types.
    assert nodes[SOURCE]["catalog"]["columns"] and nodes[SOURCE]["freshness"]["status"] == "warn"

    # Whatever the version, the graph of a run serves the same.
    status, run_graph = await get_json(f"{stack.api_url}/v1/runs/{docs.run_id}/graph")
    assert status == 200
    by_id = {n["unique_id"]: n for n in run_graph["nodes"]}
    assert by_id[ORDERS]["catalog"] == cat

    await _seen_in_the_viewer(stack, checked)


async def _click(page, node: str, shown) -> None:
    """Click `node` as a person does until `shown` is in its panel: a page still settling
    (the first paint's layout) may move the node from under the first click."""
    for _ in range(5):
        at = await page.evaluate(f"viewer.position({node!r})")
        await page.mouse.click(at["x"], at["y"])
        try:
            await shown.wait_for(timeout=3_000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"clicking {node} never showed {shown}")


async def _seen_in_the_viewer(stack, checked: str) -> None:
    """The lineage page draws the source with its chip; its panel lists the check, and the
    orders panel the warehouse's types. The freshness run's page draws the source warned."""
    _, bearer = await principals.create_token(stack.bus, principal="look", team="ops", role="admin")
    async with async_playwright() as pw:
        chromium = await browser(pw)
        page = await chromium.new_page(viewport={"width": 1600, "height": 1000}, bypass_csp=True)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await sign_in(page, stack.api_url, bearer)
        await go_to(page, "'#/projects/shop'")
        await page.wait_for_function(
            f"window.viewer?.cy?.getElementById({SOURCE!r}).nonempty()", timeout=30_000
        )
        chip = await page.evaluate(f"viewer.cy.getElementById({SOURCE!r}).data('chip')")
        assert chip.startswith("data:image/svg+xml") and "warn%20" in chip, chip
        await page.locator("#graph").scroll_into_view_if_needed()
        panel = page.locator("#panel")
        for node, shown in ((SOURCE, "#node-freshness"), (ORDERS, "#node-columns")):
            await _click(page, node, panel.locator(shown))
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=ARTIFACTS / "lineage-freshness.png")
        columns = await panel.locator("#node-columns").inner_text()
        assert "INTEGER" in columns and "VARCHAR" in columns, columns
        await page.evaluate(f"viewer.select({SOURCE!r})")
        assert "warn" in await panel.locator("#node-freshness").inner_text()

        await go_to(page, f"'#/runs/{checked}'")
        await page.wait_for_function(f"window.viewer?.status?.({SOURCE!r}) === 'warned'")
        drawn = await page.evaluate(f"viewer.cy.getElementById({SOURCE!r}).data()")
        assert drawn["label"] == "shop.raw_orders" and drawn["chip"] == chip
        await chromium.close()
    assert errors == []


def _write(tmp_path, body) -> object:
    path = tmp_path / "catalog.json"
    path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
    return path


@pytest.mark.parametrize(
    "body",
    [b"{not json", [1, 2], {"nodes": {"model.a.b": {"columns": [1]}}}, {"nodes": 7}],
)
def test_a_malformed_catalog_is_refused_naming_the_file(tmp_path, body):
    with pytest.raises(ValueError, match="catalog.json is not a dbt catalog"):
        catalog.read(_write(tmp_path, body))


def test_a_huge_catalog_is_cut_within_its_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "NODES", 3)
    monkeypatch.setattr(catalog, "COLUMNS", 5)
    column = {"type": "x" * 10_000, "index": 1, "name": "c"}
    columns = {"c": column, "d": {"type": "INTEGER"}}
    nodes = {f"model.p.m{i}": {"columns": columns} for i in range(9)}
    found = catalog.read(_write(tmp_path, {"nodes": nodes}))
    assert [n.unique_id for n in found.nodes] == ["model.p.m0", "model.p.m1"]
    assert found.cut == 7  # a third node's columns would pass COLUMNS
    assert len(found.nodes[0].columns[0].data_type) < 2 * catalog.NAME_CHARS  # head and tail
    assert [c.name for c in found.nodes[0].columns] == ["c", "d"]  # indexed first
    monkeypatch.setattr(catalog, "FILE_BYTES", 100)
    with pytest.raises(ValueError, match="over the 100-byte limit"):
        catalog.read(_write(tmp_path, {"nodes": nodes}))


def test_a_malformed_sources_file_never_breaks_a_result():
    hostile = {
        "results": [
            7,
            {"unique_id": 3, "status": "warn"},
            {
                "unique_id": SOURCE,
                "status": "warn",
                "max_loaded_at": ["x"],
                "criteria": "no",
                "max_loaded_at_time_ago_in_s": float("nan"),
            },  # fmt: skip
            {
                "unique_id": "source.p.s.t",
                "status": "pass",
                "criteria": {"warn_after": {"count": "many", "period": 4}},
            },  # fmt: skip
        ]
    }
    nodes = results.from_artifacts(results.freshness_as_results(hostile), None)
    assert [n.unique_id for n in nodes] == [SOURCE, "source.p.s.t"]
    assert nodes[0].freshness == ev.Freshness() and nodes[1].freshness == ev.Freshness()
    for shape in ([1], "x", {"results": {"a": 1}}):
        assert results.freshness_as_results(shape)["results"] == []


async def test_a_catalog_too_large_or_not_a_catalog_is_a_dead_letter(stack):
    """Published as an operator could: the fold dead-letters each and folds the next."""
    bus = stack.bus
    garbage = await bus.put_blob(b'[{"unique_id": 5}]')
    huge = await bus.put_blob(b"[" + b" " * (33 * 1024 * 1024) + b"]")
    good = ev.CatalogNode(
        unique_id=ORDERS, columns=[ev.CatalogColumn(name="order_id", data_type="INTEGER")]
    )
    for n, digest in enumerate((garbage, huge), start=1):
        blob = ev.Blob(digest=digest, size=10, count=1)  # a size that lies
        await bus.publish(ev.CatalogGenerated(project="shop", run_id=f"bad{n}", attempt=1,
                                              nodes_blob=blob))  # fmt: skip
    await bus.publish(ev.CatalogGenerated(project="shop", run_id="ok", attempt=1, nodes=[good]))
    await settled(stack)
    status, body = await get_json(f"{stack.api_url}/v1/dead-letters")
    assert status == 200
    dead = {d["subject"]: d["error"] for d in body["dead_letters"] if d["projector"] == "catalog"}
    assert len(dead) == 2, dead
    assert any("over the" in e for e in dead.values()), dead
    async with stack.pool.acquire() as conn:
        columns = await conn.fetchval(
            "SELECT columns FROM node_catalog WHERE project = 'shop' AND unique_id = $1", ORDERS
        )
    assert msgspec.convert(columns, list[ev.CatalogColumn]) == good.columns

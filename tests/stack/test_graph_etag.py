"""A graph page is served with an ETag: a caller holding it gets a 304, a compressed
body goes out to whoever accepts one, and anything the graph fold applies (a declared
write on one of its relations) is a new page, never the kept one."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import aiohttp
import msgspec
from jetdbt.shared.bus import events as ev
from jetdbt.shared.identity import principals
from multidict import CIMultiDict

from tests.support import recorded_log
from tests.support.helpers import auth_headers, get_json, wait_for

recorded_stack = recorded_log.recorded_stack  # a fixture


async def _get(session, url: str, **headers) -> tuple[int, CIMultiDict, bytes]:
    headers.update(auth_headers(url))
    async with session.get(url, headers=headers, auto_decompress=False) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.read()


async def test_a_graph_page_is_kept_compressed_and_answered_by_its_etag(recorded_stack):
    project = recorded_log.recording().meta["project"]
    url = f"{recorded_stack.api_url}/v1/projects/{project}/graph"
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        status, headers, raw = await _get(session, url, **{"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        etag = headers["ETag"]
        assert etag.startswith('W/"')
        body = msgspec.json.decode(gzip.decompress(raw))
        status, plain_headers, plain = await _get(session, url, **{"Accept-Encoding": "identity"})
        assert status == 200 and "Content-Encoding" not in plain_headers
        assert msgspec.json.decode(plain) == body and plain_headers["ETag"] == etag

        status, headers, raw = await _get(session, url, **{"If-None-Match": etag})
        assert (status, raw, headers["ETag"]) == (304, b"", etag)
        status, _, _ = await _get(session, url, **{"If-None-Match": 'W/"other", ' + etag})
        assert status == 304
        status, _, _ = await _get(session, f"{url}?limit=2", **{"If-None-Match": etag})
        assert status == 200  # another page of the same graph is another document

        node = next(n for n in body["nodes"] if n["relation"] and not n["declared_writes"])
        await recorded_stack.bus.publish(
            ev.RelationMaterialized(
                relation=node["relation"], producer="etag-test", row_count=7, at=datetime.now(UTC)
            )
        )

        async def changed():
            found = await _get(
                session, url, **{"If-None-Match": etag, "Accept-Encoding": "identity"}
            )
            return found if found[0] == 200 else None

        status, headers, raw = await wait_for(changed, timeout=30)
        assert headers["ETag"] != etag
        fresh = {n["unique_id"]: n for n in msgspec.json.decode(raw)["nodes"]}
        assert [w["producer"] for w in fresh[node["unique_id"]]["declared_writes"]] == ["etag-test"]


async def _twin(stack, project: str, of_version: str, **where) -> dict:
    """The project's graph of `of_version` stored again, the same bytes, under `where`'s project,
    version or run; its page once the graph fold has it."""
    row = await stack.pool.fetchrow(
        "SELECT * FROM graph_versions WHERE project = $1 AND version = $2 AND scope = 'version'",
        project,
        of_version,
    )
    event = ev.GraphIngested(
        project=project,
        version=of_version,
        scope="version",
        graph_digest=row["graph_digest"],
        graph_size=1,
        node_count=row["node_count"],
        edge_count=row["edge_count"],
        principal="twin",
    )
    event = msgspec.structs.replace(event, **where)
    await stack.bus.publish(event)
    page = (
        f"/v1/runs/{event.run_id}/graph"
        if event.run_id
        else f"/v1/projects/{event.project}/graph?version={event.version}"
    )

    async def folded():
        status, body = await get_json(f"{stack.api_url}{page}")
        return body if status == 200 else None

    return await wait_for(folded, timeout=30)


async def test_two_graphs_of_the_same_bytes_are_two_pages_each_of_its_own_key(recorded_stack):
    """The graph's bytes name no project nor version: a new version (or another project) whose
    graph is byte for byte an older one's gets its own page and ETag, never the other's."""
    project = recorded_log.recording().meta["project"]
    base = f"{recorded_stack.api_url}/v1/projects/{project}/graph"
    status, first = await get_json(base)
    assert status == 200
    version = "sha256:" + "7" * 64  # a version's name is its bundle's digest
    twin = await _twin(recorded_stack, project, first["version"], version=version)
    assert (twin["version"], twin["principal"]) == (version, "twin")
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        _, twin_headers, _ = await _get(session, f"{base}?version={version}")
        status, headers, raw = await _get(
            session, f"{base}?version={first['version']}", **{"Accept-Encoding": "identity"}
        )
    assert status == 200 and headers["ETag"] != twin_headers["ETag"]
    again = msgspec.json.decode(raw)
    assert (again["version"], again["principal"]) == (first["version"], first["principal"])


async def test_a_run_graph_the_progress_fold_has_not_seen_is_read_only_in_its_projects_scope(
    recorded_stack,
):
    """A run's graph stored before its run is folded (the progress fold behind, or stopped)
    has no run row to tell its project: the graph's own project is checked, so another
    team's viewer never reads it (nor its models' code)."""
    project = recorded_log.recording().meta["project"]
    status, first = await get_json(f"{recorded_stack.api_url}/v1/projects/{project}/graph")
    assert status == 200
    await _twin(recorded_stack, project, first["version"], scope="run", run_id="not-folded-run")
    _, bearer = await principals.create_token(
        recorded_stack.bus, principal="mallory", team="elsewhere", role="viewer", project="*"
    )
    status, body = await get_json(f"{recorded_stack.api_url}/v1/runs/not-folded-run/graph", bearer)
    assert status == 403 and "raw_code" not in str(body), body

"""A graph page is served with an ETag: a caller holding it gets a 304, a compressed
body goes out to whoever accepts one, and anything the graph fold applies (a declared
write on one of its relations) is a new page, never the kept one."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import aiohttp
import msgspec
from jetdbt.shared.bus import events as ev
from multidict import CIMultiDict

from tests.support import recorded_log
from tests.support.helpers import auth_headers, wait_for

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

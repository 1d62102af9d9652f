"""A bucket's keys, read from its stream's per-subject counts, never missing one.

nats-py's `KeyValue.keys()` watches the bucket and ends at its first "nothing pending"
marker. When the server has sent every entry before the watcher counted the first, that
marker comes at once and the bucket reads empty: under load a project of 20 hooks read
as none, and its 21st was let in. The stream's info lists each subject that holds a
message, a page at a time (the server sends at most 100,000 per answer, and nats-py's
`stream_info` drops the paging, so it is asked here). A key deleted or purged keeps its
marker there, so a caller reads each key and skips those gone (KeyNotFoundError), as it
does for a key removed meanwhile.
"""

from __future__ import annotations

import json

from nats.js.errors import APIError

__all__ = ["keys"]

_API = "$JS.API"  # the JetStream API prefix every jetdbt account uses (no domain)


async def keys(bus, bucket: str, prefix: str = "") -> list[str]:
    """The keys of `bucket` starting with `prefix` (empty, or ending at a token's dot),
    sorted; deleted ones included."""
    if prefix and not prefix.endswith("."):
        raise ValueError(f"a key prefix ends with a dot, not {prefix[-1:]!r}: {prefix!r}")
    head = f"$KV.{bucket}."
    found: set[str] = set()  # a key added between pages may shift another into both
    offset = 0
    while True:
        asked = {"subjects_filter": f"{head}{prefix}>", "offset": offset}
        reply = await bus.nc.request(
            f"{_API}.STREAM.INFO.KV_{bucket}", json.dumps(asked).encode(), timeout=5
        )
        answer = json.loads(reply.data)
        if "error" in answer:
            APIError.from_error(answer["error"])
        page = list((answer.get("state") or {}).get("subjects") or {})
        found.update(s[len(head) :] for s in page)
        offset += len(page)
        if not page or offset >= answer.get("total", 0):
            return sorted(found)

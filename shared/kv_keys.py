"""A bucket's keys, read from its stream's per-subject counts, never missing one.

nats-py's `KeyValue.keys()` watches the bucket and ends at its first "nothing pending"
marker. When the server has sent every entry before the watcher counted the first, that
marker comes at once and the bucket reads empty: under load a project of 20 hooks read
as none, and its 21st was let in. The stream's info lists each subject that holds a
message. A key deleted or purged keeps its marker there, so a caller reads each key and
skips those gone (KeyNotFoundError), as it does for a key removed meanwhile.
"""

from __future__ import annotations

__all__ = ["keys"]


async def keys(js, bucket: str, prefix: str = "") -> list[str]:
    """The keys of `bucket` starting with `prefix` (which ends at a token's dot, or is
    empty), sorted; deleted ones included."""
    head = f"$KV.{bucket}."
    info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{head}{prefix}>")
    return sorted(s[len(head) :] for s in (info.state.subjects or {}))

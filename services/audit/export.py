"""The event log as Parquet, one row per event, streamed so memory stays flat.

Each row is classified by its subject's family: a payload whose type or project is not its
subject's is kept verbatim with no type, project or run (it is not a fact of anything).
Messages are read in stream order in batches, each batch becomes one record
batch written through a ParquetWriter, and nothing else is held: a million
events cost what one batch costs. A time window is turned into a sequence range
first (a binary search over stored times), so the server sends only that range.
The payload is the message as stored; a RunFinished that keeps its nodes in a blob
(a large run) has them, read from the object store, in the `nodes` column.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from jetdbt.shared.bus import events, subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.events import heads_its_subject
from jetdbt.shared.bus.stream_batches import Slice, seq_at
from jetdbt.shared.bus.streams import EVENTS

__all__ = ["SCHEMA", "Exported", "export", "parse_time"]

BATCH = 10_000

SCHEMA = pa.schema(
    [
        pa.field("stream_seq", pa.uint64(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("event_type", pa.string()),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("project", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("payload", pa.string(), nullable=False),
        pa.field("nodes", pa.string()),
    ]
)


class Exported(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    rows: int
    first_seq: int | None
    last_seq: int | None


class _Head(msgspec.Struct):
    """The fields every row shows in columns; the rest stays in the payload."""

    type: str | None = None
    project: str | None = None
    run_id: str | None = None
    nodes_blob: events.Blob | None = None  # where a RunFinished keeps its nodes


_head = msgspec.json.Decoder(_Head)
_FINISHED = events.RunFinished.__struct_config__.tag


def parse_time(text: str) -> datetime:
    """ISO 8601, a date alone meaning its midnight; no zone means UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2025-06-02T09:30:00Z)") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def _batch(bus: Bus, pairs, project: str | None) -> pa.RecordBatch:
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    for seq, m in pairs:
        try:
            head = _head.decode(m.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            head = _Head()
        if not heads_its_subject(head.type, head.project, m.subject):
            # Not a fact of its subject's family and project (a run.finished payload on a
            # relation subject): kept as stored, attributed to no type, project or run.
            head = _Head()
        if project is not None and head.project != project:
            continue  # a relation's subject token may equal a project name
        cols["stream_seq"].append(seq)
        cols["subject"].append(m.subject)
        cols["event_type"].append(head.type)
        cols["time"].append(m.metadata.timestamp)
        cols["project"].append(head.project)
        cols["run_id"].append(head.run_id)
        cols["payload"].append(m.data.decode(errors="replace"))
        blob = head.nodes_blob if head.type == _FINISHED else None
        cols["nodes"].append(None if blob is None else (await bus.get_blob(blob.digest)).decode())
    return pa.RecordBatch.from_pydict(cols, schema=SCHEMA)


async def export(
    bus: Bus,
    out: Path,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    project: str | None = None,
) -> Exported:
    """Write DBT_EVENTS (a time window of it, one project's part of it) to `out`."""
    js = bus.js
    after = await seq_at(js, EVENTS, since) if since else 0
    last = await seq_at(js, EVENTS, until) if until else None
    pattern = subjects.project_pattern(project)
    rows, first_seq, last_seq = 0, None, None
    with pq.ParquetWriter(out, SCHEMA, compression="zstd") as writer:
        if last is None or last > after:
            async with Slice(js, EVENTS, pattern, after=after, until=last, batch=BATCH) as it:
                async for pairs in it:
                    batch = await _batch(bus, pairs, project)
                    if batch.num_rows:
                        writer.write_batch(batch)
                        rows += batch.num_rows
                        seqs = batch.column("stream_seq")
                        first_seq = first_seq or seqs[0].as_py()
                        last_seq = seqs[-1].as_py()
    return Exported(path=str(out), rows=rows, first_seq=first_seq, last_seq=last_seq)

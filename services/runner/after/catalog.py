"""`dbt docs generate`'s catalog.json as a CatalogGenerated event: each node's and source's
columns with the warehouse's types, which the graph then serves beside the declared ones.

catalog.json is as large as the warehouse it describes, and a project's code can write
anything there, so it is read within bounds: a file past FILE_BYTES, or one that is not a
catalog, publishes nothing (a warning in the run's log, never a failed run); past NODES or
COLUMNS the first ones are kept and the event counts the nodes left out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.wording.short_quote import shorten

if TYPE_CHECKING:
    from jetdbt.services.runner.attempts.attempt import Attempt

__all__ = ["FILE_BYTES", "NODES", "COLUMNS", "NAME_CHARS", "Catalog", "read", "publish"]

FILE_BYTES = 128 * 1024 * 1024  # the most of catalog.json a runner decodes
NODES = 50_000  # nodes and sources kept from one catalog
COLUMNS = 250_000  # columns kept from one catalog, all nodes together
NAME_CHARS = 256  # a column's name, and its type, cut to this


class _Column(msgspec.Struct):
    type: str | None = None
    index: int | None = None
    name: str = ""


class _Entry(msgspec.Struct):
    columns: dict[str, _Column] = {}


class _Metadata(msgspec.Struct):
    generated_at: str | None = None


class _File(msgspec.Struct):
    """What jetdbt reads of catalog.json; every other key is ignored."""

    metadata: _Metadata = msgspec.field(default_factory=_Metadata)
    nodes: dict[str, _Entry] = {}
    sources: dict[str, _Entry] = {}


_decoder = msgspec.json.Decoder(_File)


class Catalog(msgspec.Struct, frozen=True, kw_only=True):
    nodes: list[ev.CatalogNode]
    cut: int
    generated_at: datetime | None


def _generated_at(value: str | None) -> datetime | None:
    try:
        stamp = datetime.fromisoformat((value or "").replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _columns(entry: _Entry) -> list[ev.CatalogColumn]:
    """In the warehouse's order (its index), a column without one after those with one."""
    ordered = sorted(
        entry.columns.items(), key=lambda kv: (kv[1].index is None, kv[1].index or 0, kv[0])
    )
    return [
        ev.CatalogColumn(
            name=shorten(c.name or key, NAME_CHARS), data_type=shorten(c.type or "", NAME_CHARS)
        )
        for key, c in ordered
    ]


def read(path: Path) -> Catalog:
    """The catalog at `path`, within the bounds above; ValueError naming what is wrong."""
    size = path.stat().st_size
    if size > FILE_BYTES:
        raise ValueError(f"catalog.json is {size} bytes, over the {FILE_BYTES}-byte limit")
    try:
        found = _decoder.decode(path.read_bytes())
    except msgspec.DecodeError as exc:  # ValidationError too: a subclass
        raise ValueError(f"catalog.json is not a dbt catalog: {exc}") from None
    entries = sorted({**found.sources, **found.nodes}.items())
    nodes, columns = [], 0
    for unique_id, entry in entries:
        if len(nodes) == NODES or columns + len(entry.columns) > COLUMNS:
            break
        nodes.append(ev.CatalogNode(unique_id=unique_id, columns=_columns(entry)))
        columns += len(entry.columns)
    return Catalog(
        nodes=nodes,
        cut=len(entries) - len(nodes),
        generated_at=_generated_at(found.metadata.generated_at),
    )


async def publish(attempt: Attempt) -> None:
    """Publish the catalog `attempt`'s dbt wrote, if it wrote one that can be read."""
    path = attempt.artifact_path("catalog.json")
    if path is None or not path.exists():
        return
    try:
        catalog = read(path)
    except (OSError, ValueError) as exc:
        jlog.get("runner", project=attempt.project, run_id=attempt.run_id).warning(
            "catalog_not_read", error=str(exc)
        )
        await attempt.log(f"jetdbt: the catalog's column types are not kept: {exc}")
        return
    bus = attempt.ctx.bus
    nodes, blob = await event_blobs.split(bus, catalog.nodes)
    await bus.publish(
        ev.CatalogGenerated(
            project=attempt.project,
            run_id=attempt.run_id,
            attempt=attempt.number,
            generated_at=catalog.generated_at,
            nodes=nodes,
            nodes_blob=blob,
            cut=catalog.cut,
        )
    )

"""Column lineage: the opt-in static-analysis pass and the parquet index it writes.

Best effort throughout: what is missing or unreadable becomes a note for the job
log, never a failed deploy or run; only a timeout or a cancel propagates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from jetdbt.services.runner.provision import engine
from jetdbt.services.runner.setup.job_setup import Prepared
from jetdbt.shared.runs.graph import ColumnEdge, TypedColumn

__all__ = [
    "ColumnIndex",
    "read_column_index",
    "column_index",
    "MAX_COLUMN_EDGES",
    "LINEAGE_FILE",
    "COLUMNS_FILE",
    "NO_INDEX_NOTE",
]

# A scan edge reaches every output column of its model, so it is most of an index;
# when the bound bites, value lineage (copy, mod) is what is kept.
MAX_COLUMN_EDGES = 200_000
_VALUE_KINDS = ("copy", "mod")
LINEAGE_FILE = "dbt.column_lineage.parquet"
COLUMNS_FILE = "dbt.node_columns.parquet"
_INDEX_TARGET = "target-index"
NO_INDEX_NOTE = (
    "column_lineage: engine dbt-core-1x has no --write-index flag, so this graph has no"
    " column lineage (engines dbt-core-2x and fusion write it)"
)


class ColumnIndex(msgspec.Struct, frozen=True, kw_only=True):
    """What one read of the engine's index gave; `notes` go to the job log."""

    edges: list[ColumnEdge]
    schemas: dict[str, list[TypedColumn]]
    notes: list[str] = []


def _pick(row: dict, *names: str) -> Any:
    """The first of several spellings engine releases have used for one index column."""
    return next((row[n] for n in names if row.get(n) is not None), None)


def _read(path: Path, notes: list[str]) -> list[dict] | None:
    if not path.exists():
        notes.append(f"column_lineage: {path.name} was not written")
        return None
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        notes.append(f"column_lineage: {path.name} is unreadable ({exc})")
        return None


def read_column_index(index_dir: Path, bound: int = MAX_COLUMN_EDGES) -> ColumnIndex | None:
    """Column edges and typed column schemas from the engine's index; best effort, never raises.

    None when neither file is there. A partial index (a failed analysis still writes the
    edges of the models that analyzed) is a normal result; `notes` says what is missing.
    """
    if not any((index_dir / name).exists() for name in (LINEAGE_FILE, COLUMNS_FILE)):
        return None
    notes: list[str] = []
    lineage = _read(index_dir / LINEAGE_FILE, notes)
    cols = _read(index_dir / COLUMNS_FILE, notes)
    edges = [
        ColumnEdge(
            str(_pick(r, "from_node_unique_id", "parent_node_unique_id")),
            str(_pick(r, "from_column_name", "parent_column_name")),
            str(_pick(r, "to_node_unique_id", "child_node_unique_id")),
            str(_pick(r, "to_column_name", "child_column_name")),
            str(_pick(r, "lineage_kind", "evolution") or ""),
        )
        for r in lineage or []
    ]
    edges = sorted(set(edges))
    if len(edges) > bound:
        edges.sort(key=lambda e: e.lineage_kind.lower() not in _VALUE_KINDS)  # stable
        notes.append(
            f"column_lineage: kept {bound} of {len(edges)} column edges (copy and mod first)"
        )
        edges = sorted(edges[:bound])
    ordered: dict[str, list[tuple[int, int, TypedColumn]]] = {}
    for pos, r in enumerate(cols or []):
        node = _pick(r, "unique_id", "node_unique_id")
        name = _pick(r, "column_name", "name")
        if node is None or name is None:
            continue
        index = _pick(r, "column_index")
        ordered.setdefault(str(node), []).append(
            (
                pos if index is None else int(index),
                pos,
                TypedColumn(
                    name=str(name),
                    declared_type=_pick(r, "declared_type", "data_type_declared"),
                    inferred_type=_pick(r, "inferred_type", "data_type_inferred"),
                    description=str(_pick(r, "description") or ""),
                ),
            )
        )
    schemas = {node: [c for _, _, c in sorted(rows)] for node, rows in ordered.items()}
    return ColumnIndex(edges=edges, schemas=schemas, notes=notes)


async def column_index(
    prepared: Prepared, on_line: Callable[[str], Awaitable[None]], timeout: float | None
) -> ColumnIndex | None:
    """The opt-in static-analysis pass (descriptor `column_lineage: true`).

    A separate `dbt compile` with its own target path, because strict analysis rejects
    SQL a build accepts. It takes the run's --full-refresh, since is_incremental() steers
    what compiles. Everything about the artifact is best effort and logged; a timeout or a
    cancel still propagates, because those belong to the job.
    """
    plan = prepared.plan
    if plan.engine == engine.DEFAULT:
        await on_line(NO_INDEX_NOTE)
        return None
    args = [*plan.common_args(), "--static-analysis", "strict", "--write-index"]
    if plan.full_refresh:
        args.append("--full-refresh")
    compile_ = prepared.dbt("compile", args, log_dir="logs-index", target_dir=_INDEX_TARGET)
    code = await compile_.run(timeout=timeout)
    found = read_column_index(compile_.artifact_path("index"))
    if found is None:
        await on_line(f"column_lineage: no index appeared (dbt compile exited {code}):")
        for line in compile_.error_tail().splitlines():
            await on_line(line)
        return None
    for note in found.notes:
        await on_line(note)
    return found

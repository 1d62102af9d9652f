"""A projection's rows keyed by node id, over one graph page's range of ids: the one statement
shape of every per-node read a graph page sets on its nodes (freshness, catalog), built as one
JSON object by Postgres and decoded, its shape checked, in one go."""

from __future__ import annotations

from typing import Any

import msgspec
from jetdbt.projections.answers import Database

__all__ = ["ByNode"]


class ByNode:
    """The `columns` of `table`'s rows of a project, by unique_id, as `answer` Structs."""

    def __init__(self, table: str, columns: tuple[str, ...], answer: type) -> None:
        fields = ", ".join(f"'{c}', {c}" for c in columns)
        self._sql = (
            f"SELECT coalesce(json_object_agg(unique_id, json_build_object({fields})), '{{}}')"
            f"::text FROM {table} WHERE project = $1 AND ($2::text IS NULL OR unique_id > $2)"
            " AND ($3::text IS NULL OR unique_id <= $3)"
        )
        self._decoder = msgspec.json.Decoder(dict[str, answer])

    async def read(self, db: Database, project: str, after: str | None, last: str | None) -> Any:
        """Those whose id sorts after `after` and up to `last` (None: unbounded)."""
        return self._decoder.decode(await db.fetchval(self._sql, project, after, last))

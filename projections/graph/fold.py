"""Graph fold: graph blobs into node/edge tables, and declared writes onto relations.

GraphIngested names a blob; the fold reads it from the object store (reading, not
publishing) and replaces that key's row set. Retention runs here, on every graph
event, so no separate sweeper has to know these tables, and it is measured in
event time so a replay prunes exactly what the live projection pruned.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
from jetdbt.projections.graph.layers import PRODUCING, layers
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import BlobUnreadable, Bus
from jetdbt.shared.runs import graph as gm
from jetdbt.shared.runs.relations import InvalidRelation, normalise
from nats.js.errors import ObjectNotFoundError

__all__ = ["GraphFold", "DEPLOYED", "VERSIONS_KEPT", "RUN_SNAPSHOT_DAYS", "PARSE_GRAPHS_KEPT"]

DEPLOYED = "~deployed"
VERSIONS_KEPT = 50  # deployed graphs per project: reaching it empties old versions' run pages
RUN_SNAPSHOT_DAYS = 30  # a run page is transient; its snapshot expires on a clock
PARSE_GRAPHS_KEPT = 5  # parses per (project, principal): older ones are dead once a newer lands

_EDGE_COLUMNS = ("project", "version", "run_id", "parent", "child", "kind")
_COLUMN_EDGE_COLUMNS = (
    "project", "version", "run_id", "from_node", "from_column", "to_node", "to_column",
    "lineage_kind",
)  # fmt: skip


def _json(value) -> str:
    return msgspec.json.encode(value).decode()


class GraphFold:
    name = "graph"

    def __init__(self, bus: Bus):
        self.bus = bus

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if isinstance(event, ev.GraphIngested):
            await self._graph(conn, event, seq)
        elif isinstance(event, ev.RelationMaterialized):
            await self._write(conn, event, seq)
        elif isinstance(event, ev.RelationRefused):
            await conn.execute(
                "UPDATE relation_writes SET refused_reason = $2 WHERE stream_seq = $1",
                event.write_seq,
                event.reason,
            )

    async def _blob(self, digest: str) -> gm.Graph:
        try:
            return gm.decode(await self.bus.get_blob(digest))
        except ObjectNotFoundError:
            raise BlobUnreadable(f"graph blob {digest} is not in the object store") from None

    async def _graph(self, conn, e: ev.GraphIngested, seq: int) -> None:
        graph = await self._blob(e.graph_digest)
        key = (e.project, e.version, e.run_id or DEPLOYED)
        await conn.execute(
            "DELETE FROM graph_versions WHERE project = $1 AND version = $2 AND run_id = $3", *key
        )
        await conn.execute(
            "INSERT INTO graph_versions (project, version, run_id, scope, graph_digest,"
            " content_digest, relation_root, default_database, node_count, edge_count,"
            " column_edge_count, principal, ingested_at, stream_seq)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)",
            *key,
            e.scope,
            e.graph_digest,
            graph.digest,
            graph.relation_root,
            graph.default_database,
            len(graph.nodes),
            len(graph.edges),
            len(graph.column_edges),
            e.principal,
            e.at,
            seq,
        )
        owned = None if graph.owned is None else set(graph.owned)
        n = graph.nodes
        placed = layers(
            (x.unique_id for x in n if x.resource_type in PRODUCING),
            ((e.parent, e.child) for e in graph.edges),
        )
        # One statement over arrays: COPY has no binary encoder for the pool's JSON codec.
        await conn.execute(
            "INSERT INTO graph_nodes (project, version, run_id, unique_id, resource_type, name,"
            " package, relation, owned, materialized, tags, description, columns, column_schema,"
            " test_severity, test_kind, attached_node, raw_code, layer, layer_row)"
            " SELECT $1, $2, $3, u, t, nm, pk, rel, o, mat, ARRAY(SELECT jsonb_array_elements_text"
            "(tg::jsonb)), d, c::jsonb, cs::jsonb, sev, tk, an, rc, ly, lr FROM unnest($4::text[],"
            " $5::text[], $6::text[], $7::text[], $8::text[], $9::bool[], $10::text[], $11::text[],"
            " $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[],"
            " $18::text[], $19::int[], $20::int[])"
            " AS x(u, t, nm, pk, rel, o, mat, tg, d, c, cs, sev, tk, an, rc, ly, lr)",
            *key,
            [x.unique_id for x in n],
            [x.resource_type for x in n],
            [x.name for x in n],
            [x.package for x in n],
            [x.relation for x in n],
            [owned is None or x.unique_id in owned for x in n],
            [x.materialized for x in n],
            [_json(x.tags) for x in n],
            [x.description for x in n],
            [_json(x.columns) for x in n],
            [None if x.column_schema is None else _json(x.column_schema) for x in n],
            [x.test_severity for x in n],
            [x.test_kind for x in n],
            [x.attached_node for x in n],
            [x.raw_code for x in n],
            [placed.get(x.unique_id, (None, None))[0] for x in n],
            [placed.get(x.unique_id, (None, None))[1] for x in n],
        )
        await conn.copy_records_to_table(
            "graph_edges",
            columns=_EDGE_COLUMNS,
            records=[(*key, x.parent, x.child, x.kind) for x in graph.edges],
        )
        if graph.column_edges:
            await conn.copy_records_to_table(
                "graph_column_edges",
                columns=_COLUMN_EDGE_COLUMNS,
                records=[
                    (*key, c.from_node, c.from_column, c.to_node, c.to_column, c.lineage_kind)
                    for c in graph.column_edges
                ],
            )
        await self._prune(conn, e)

    async def _prune(self, conn, e: ev.GraphIngested) -> None:
        """Newest VERSIONS_KEPT deployed graphs per project; run and parse graphs older than
        RUN_SNAPSHOT_DAYS; newest PARSE_GRAPHS_KEPT parses per (project, principal).
        Child rows go with their graph_versions row (ON DELETE CASCADE)."""
        await conn.execute(
            "DELETE FROM graph_versions WHERE project = $1 AND scope = $2 AND stream_seq < ("
            " SELECT stream_seq FROM graph_versions WHERE project = $1 AND scope = $2"
            " ORDER BY stream_seq DESC OFFSET $3 LIMIT 1)",
            e.project,
            gm.SCOPE_VERSION,
            VERSIONS_KEPT - 1,
        )
        await conn.execute(
            "DELETE FROM graph_versions WHERE scope <> $1 AND ingested_at < $2",
            gm.SCOPE_VERSION,
            e.at - timedelta(days=RUN_SNAPSHOT_DAYS),
        )
        if e.scope == gm.SCOPE_PARSE:
            await conn.execute(
                "DELETE FROM graph_versions WHERE project = $1 AND scope = $2 AND principal = $3"
                " AND stream_seq < (SELECT stream_seq FROM graph_versions WHERE project = $1"
                " AND scope = $2 AND principal = $3 ORDER BY stream_seq DESC OFFSET $4 LIMIT 1)",
                e.project,
                gm.SCOPE_PARSE,
                e.principal,
                PARSE_GRAPHS_KEPT - 1,
            )

    async def _write(self, conn, e: ev.RelationMaterialized, seq: int) -> None:
        """Recorded under the canonical key, so it lands on the node every spelling shares.
        A key that does not parse is kept as written; the runner-side watcher refuses it."""
        try:
            relation = normalise(e.relation)
        except InvalidRelation:
            relation = e.relation
        await conn.execute(
            "INSERT INTO relation_writes (stream_seq, relation, producer, status, row_count,"
            " written_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (stream_seq) DO NOTHING",
            seq,
            relation,
            e.producer,
            e.status,
            e.row_count,
            e.at,
        )

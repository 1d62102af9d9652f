"""A project's graph: nodes, ref()/source edges, relation keys and optional column lineage.

`build_graph` (builder.py) is a pure function of manifest.json, plus the engine's
parquet index (columns.py) when the project opted into column lineage.
`publish_graph` (publisher.py) stores the graph in the object store under its
digest and publishes GraphIngested naming it.

Three scopes. A deploy stores the VERSION's graph (what every run of it reads).
A run whose vars can change the model set (dynamic descriptor, vars or
full_refresh override) re-ingests before it builds and stores its own snapshot,
but only when its digest differs from the version's. A parse of an undeployed
bundle (version "") stores a graph keyed by that job alone.
"""

from jetdbt.services.runner.graph.builder import build_graph, target_database
from jetdbt.services.runner.graph.columns import (
    COLUMNS_FILE,
    LINEAGE_FILE,
    MAX_COLUMN_EDGES,
    NO_INDEX_NOTE,
    ColumnIndex,
    column_index,
    read_column_index,
)
from jetdbt.services.runner.graph.publisher import (
    GraphRefreshFailed,
    ingest_version_graph,
    needs_run_graph,
    publish_graph,
    refresh_run_graph,
    version_graph_digest,
)

__all__ = [
    "ColumnIndex",
    "GraphRefreshFailed",
    "build_graph",
    "target_database",
    "read_column_index",
    "column_index",
    "publish_graph",
    "ingest_version_graph",
    "version_graph_digest",
    "needs_run_graph",
    "refresh_run_graph",
    "MAX_COLUMN_EDGES",
    "LINEAGE_FILE",
    "COLUMNS_FILE",
    "NO_INDEX_NOTE",
]

-- The graph projection. One row set per (project, version, run_id):
--   run_id = '~deployed'  the version's own graph, written at deploy;
--   run_id = <run id>     a run's snapshot (scope 'run'), or a parse of an undeployed
--                         bundle (scope 'parse', version '').
-- Sentinels rather than NULL: Postgres never treats two NULLs as one key, so a
-- re-ingest would pile up row sets instead of replacing one. '~' is not allowed in a
-- run id, so the sentinel cannot collide with one.
CREATE TABLE IF NOT EXISTS graph_versions (
    project             text NOT NULL,
    version             text NOT NULL,
    run_id              text NOT NULL,
    scope               text NOT NULL,
    graph_digest        text NOT NULL,
    content_digest      text NOT NULL,
    relation_root       text NOT NULL,
    default_database    text,
    node_count          integer NOT NULL,
    edge_count          integer NOT NULL,
    column_edge_count   integer NOT NULL,
    principal           text NOT NULL DEFAULT '',
    ingested_at         timestamptz NOT NULL,
    stream_seq          bigint NOT NULL,
    PRIMARY KEY (project, version, run_id)
);
CREATE INDEX IF NOT EXISTS graph_versions_newest ON graph_versions (project, scope, stream_seq DESC);
CREATE INDEX IF NOT EXISTS graph_versions_by_run ON graph_versions (run_id);
CREATE INDEX IF NOT EXISTS graph_versions_age ON graph_versions (scope, ingested_at);

CREATE TABLE IF NOT EXISTS graph_nodes (
    project         text NOT NULL,
    version         text NOT NULL,
    run_id          text NOT NULL,
    unique_id       text NOT NULL,
    resource_type   text NOT NULL,
    name            text NOT NULL,
    package         text NOT NULL,
    relation        text,
    owned           boolean NOT NULL,
    materialized    text,
    tags            text[] NOT NULL,
    description     text NOT NULL,
    columns         jsonb NOT NULL,
    column_schema   jsonb,
    test_severity   text,
    test_kind       text,
    attached_node   text,
    raw_code        text NOT NULL,
    PRIMARY KEY (project, version, run_id, unique_id),
    FOREIGN KEY (project, version, run_id)
        REFERENCES graph_versions (project, version, run_id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS graph_nodes_by_relation ON graph_nodes (relation)
    WHERE relation IS NOT NULL;

-- ref() and source lineage; test edges too (a test reads what it tests).
CREATE TABLE IF NOT EXISTS graph_edges (
    project     text NOT NULL,
    version     text NOT NULL,
    run_id      text NOT NULL,
    parent      text NOT NULL,
    child       text NOT NULL,
    kind        text NOT NULL,
    PRIMARY KEY (project, version, run_id, parent, child),
    FOREIGN KEY (project, version, run_id)
        REFERENCES graph_versions (project, version, run_id) ON DELETE CASCADE
);

-- Column lineage from the engine's index: its own table, because a model reading
-- {{ this }} has column edges to itself and no ref() edge to hang them on.
CREATE TABLE IF NOT EXISTS graph_column_edges (
    project         text NOT NULL,
    version         text NOT NULL,
    run_id          text NOT NULL,
    from_node       text NOT NULL,
    from_column     text NOT NULL,
    to_node         text NOT NULL,
    to_column       text NOT NULL,
    lineage_kind    text NOT NULL,
    PRIMARY KEY (project, version, run_id, from_node, from_column, to_node, to_column,
                 lineage_kind),
    FOREIGN KEY (project, version, run_id)
        REFERENCES graph_versions (project, version, run_id) ON DELETE CASCADE
);

-- Declared writes from other systems, one row per write (its stream sequence). A write
-- naming no configured warehouse stays, marked refused, so the refusal is visible.
CREATE TABLE IF NOT EXISTS relation_writes (
    stream_seq      bigint PRIMARY KEY,
    relation        text NOT NULL,
    producer        text NOT NULL,
    status          text NOT NULL,
    row_count       bigint,
    written_at      timestamptz NOT NULL,
    refused_reason  text
);
CREATE INDEX IF NOT EXISTS relation_writes_by_relation ON relation_writes
    (relation, stream_seq DESC);

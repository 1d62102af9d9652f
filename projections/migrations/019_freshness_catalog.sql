-- What the warehouse said of a project's graph nodes: each source's last freshness check
-- (projections/freshness.py) and each node's columns with their warehouse types, from the
-- last `docs generate` that listed it (projections/catalog.py). Keyed by project and node,
-- not by version: a new version's node keeps what was last observed of its relation.
CREATE TABLE IF NOT EXISTS source_freshness (
    project         text NOT NULL,
    unique_id       text NOT NULL,
    status          text NOT NULL,
    outcome         text NOT NULL,
    message         text,
    max_loaded_at   timestamptz,
    snapshotted_at  timestamptz NOT NULL,
    age_seconds     double precision,
    warn_after      jsonb,
    error_after     jsonb,
    run_id          text NOT NULL,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (project, unique_id)
);

CREATE TABLE IF NOT EXISTS node_catalog (
    project         text NOT NULL,
    unique_id       text NOT NULL,
    columns         jsonb NOT NULL,
    generated_at    timestamptz NOT NULL,
    run_id          text NOT NULL,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (project, unique_id)
);

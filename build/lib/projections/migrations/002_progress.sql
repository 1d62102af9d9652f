-- Live run progress: one row per run, one per node the run touched.
CREATE TABLE IF NOT EXISTS runs (
    run_id          text PRIMARY KEY,
    project         text NOT NULL,
    status          text NOT NULL,
    command         jsonb,
    requested_by    text,
    requested_at    timestamptz,
    hidden          boolean NOT NULL DEFAULT false,
    attempt         integer NOT NULL DEFAULT 0,
    lost_attempts   integer[] NOT NULL DEFAULT '{}',
    version         text,
    runner          text,
    started_at      timestamptz,
    finished_at     timestamptz,
    refused_reason  text,
    totals          jsonb,
    result          jsonb,
    nodes_started   integer NOT NULL DEFAULT 0,
    nodes_finished  integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_project ON runs (project, requested_at DESC);

CREATE TABLE IF NOT EXISTS run_nodes (
    run_id          text NOT NULL,
    unique_id       text NOT NULL,
    resource_type   text,
    name            text,
    relation        text,
    status          text NOT NULL,
    outcome         text,
    message         text,
    started_at      timestamptz,
    finished_at     timestamptz,
    execution_time  double precision,
    rows_affected   bigint,
    failures        integer,
    round           integer NOT NULL DEFAULT 0,
    attempt         integer NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, unique_id)
);

CREATE TABLE IF NOT EXISTS deploys (
    project         text NOT NULL,
    deploy_id       text NOT NULL,
    status          text NOT NULL,
    version         text,
    manifest_digest text,
    engine          text,
    engine_version  text,
    adapter         text,
    adapter_version text,
    files           jsonb,
    skipped         jsonb,
    reason          text,
    requested_by    text,
    at              timestamptz NOT NULL,
    PRIMARY KEY (project, deploy_id)
);

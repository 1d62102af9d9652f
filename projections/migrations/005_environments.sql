-- The published state per (project, environment), replaced by each later publication.
CREATE TABLE IF NOT EXISTS environments (
    project             text NOT NULL,
    environment_key     text NOT NULL,
    warehouse           text NOT NULL,
    target              text NOT NULL,
    schema_name         text NOT NULL,
    database_name       text NOT NULL,
    run_id              text NOT NULL,
    version             text NOT NULL,
    manifest_digest     text NOT NULL,
    run_results_digest  text,
    published_at        timestamptz NOT NULL,
    stream_seq          bigint NOT NULL,
    PRIMARY KEY (project, environment_key)
);

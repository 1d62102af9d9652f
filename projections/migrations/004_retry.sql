-- Which run a retry would resume, per (project, principal): the latest saved state.
CREATE TABLE IF NOT EXISTS retry_state (
    project             text NOT NULL,
    principal           text NOT NULL,
    run_id              text NOT NULL,
    attempt             integer NOT NULL,
    version             text NOT NULL,
    run_results_digest  text NOT NULL,
    command             jsonb NOT NULL,
    args                jsonb NOT NULL,
    saved_at            timestamptz NOT NULL,
    stream_seq          bigint NOT NULL,
    PRIMARY KEY (project, principal)
);

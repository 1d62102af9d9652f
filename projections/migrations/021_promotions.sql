-- What each slot of a project runs (an environment, a person's own environment `dev/<who>`,
-- a pull request's check `pr:<n>`) and every promotion that moved one, from Promoted
-- events and, before environments, from each deploy that made itself current
-- (projections/promotions/fold.py).
CREATE TABLE IF NOT EXISTS environment_versions (
    project         text NOT NULL,
    slot            text NOT NULL,
    environment     text NOT NULL,
    principal       text NOT NULL,
    pr              integer NOT NULL,
    version         text NOT NULL,
    previous        text NOT NULL,
    deploy_id       text NOT NULL,
    promoted_by     text NOT NULL,
    promoted_at     timestamptz NOT NULL,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (project, slot)
);

-- Every promotion: the same columns, one row per event.
CREATE TABLE IF NOT EXISTS promotions (LIKE environment_versions);
ALTER TABLE promotions ADD PRIMARY KEY (project, stream_seq);
CREATE INDEX IF NOT EXISTS promotions_by_environment
    ON promotions (project, environment, stream_seq DESC);

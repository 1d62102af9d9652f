-- Saved jobs and their schedules (projections/jobs.py), and which job and trigger each run
-- came from (projections/progress.py).
CREATE TABLE IF NOT EXISTS jobs (
    project         text NOT NULL,
    name            text NOT NULL,
    spec            jsonb NOT NULL,
    saved_by        text NOT NULL,
    saved_at        timestamptz NOT NULL,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE TABLE IF NOT EXISTS job_schedules (
    project         text NOT NULL,
    job             text NOT NULL,
    state           text NOT NULL,
    cron            text NOT NULL,
    tz              text NOT NULL,
    principal       text NOT NULL,
    saved_at        timestamptz NOT NULL,
    fires           integer NOT NULL DEFAULT 0,
    last_fired_at   timestamptz,
    last_run_id     text,
    next_at         timestamptz,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (project, job)
);

ALTER TABLE runs ADD COLUMN IF NOT EXISTS job text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN IF NOT EXISTS trigger text NOT NULL DEFAULT '';

-- Webhooks as their facts say (projections/hooks.py): each hook (never its secret), and
-- every delivery attempt with the receiver's answer.
CREATE TABLE IF NOT EXISTS hooks (
    project         text NOT NULL,
    name            text NOT NULL,
    url             text NOT NULL,
    events          text[] NOT NULL,
    job             text NOT NULL,
    saved_by        text NOT NULL,
    saved_at        timestamptz NOT NULL,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE TABLE IF NOT EXISTS hook_deliveries (
    delivery_id     text NOT NULL,
    attempt         integer NOT NULL,
    project         text NOT NULL,
    hook            text NOT NULL,
    run_id          text NOT NULL,
    event           text NOT NULL,
    status          integer NOT NULL,
    state           text NOT NULL,
    error           text NOT NULL,
    at              timestamptz NOT NULL,
    stream_seq      bigint NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX IF NOT EXISTS hook_deliveries_by_hook ON hook_deliveries (project, hook, stream_seq);

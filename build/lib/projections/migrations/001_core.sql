-- Every projector's position and its dead letters.
CREATE TABLE IF NOT EXISTS checkpoints (
    projector   text PRIMARY KEY,
    last_seq    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS dead_letters (
    id          bigserial PRIMARY KEY,
    projector   text NOT NULL,
    stream_seq  bigint NOT NULL,
    subject     text NOT NULL,
    data        bytea NOT NULL,
    error       text NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (projector, stream_seq)
);

-- A run waiting to start holds no slot: status 'queued', why (queue_reason: the last
-- reason it waited for), its place in its queues (queue_position, 1: next; null once
-- started), when its current wait began, and how long it waited before it started.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS queue_reason text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS queue_position integer;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS queued_at timestamptz;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS queued_seconds double precision;
CREATE INDEX IF NOT EXISTS runs_queued ON runs (queued_at) WHERE status = 'queued';

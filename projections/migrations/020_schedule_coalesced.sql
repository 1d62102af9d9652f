-- The fires of a schedule that joined the run of its previous fire, still queued or running,
-- instead of queueing a second one (schedule.coalesced; projections/jobs/fold.py).
ALTER TABLE job_schedules ADD COLUMN IF NOT EXISTS coalesced integer NOT NULL DEFAULT 0;

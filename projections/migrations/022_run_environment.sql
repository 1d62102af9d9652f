-- The project environment each run builds in and the pull request it checks
-- (RunRequested.environment and .pr; projections/progress/fold.py). A run recorded before
-- environments ran in the default one, `prod`.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS environment text NOT NULL DEFAULT 'prod';
ALTER TABLE runs ADD COLUMN IF NOT EXISTS pr integer NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS runs_by_environment ON runs (project, environment, requested_at DESC);

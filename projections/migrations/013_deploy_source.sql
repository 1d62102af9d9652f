-- The folder a deployed version came from, as its deploy named it (a list of marks:
-- services/deploy_source.py); null when the deploy named none.
ALTER TABLE deploys ADD COLUMN IF NOT EXISTS source jsonb;

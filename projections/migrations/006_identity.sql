-- Who asked: the authenticated principal's team and the door a command came in by
-- ("api token <id>", "nats user <name>", "nats operator"). A project's team is the team
-- of its latest deploy that names one; the API scopes reads by it.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS team text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS door text;
ALTER TABLE deploys ADD COLUMN IF NOT EXISTS team text;
ALTER TABLE deploys ADD COLUMN IF NOT EXISTS door text;
CREATE INDEX IF NOT EXISTS deploys_team ON deploys (project, at DESC) WHERE team <> '';

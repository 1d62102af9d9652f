-- What a run recorded of each node beyond its outcome: the dbt thread that ran it (the
-- viewer's timeline lanes) and the SQL dbt compiled for it (its node panel), both from the
-- run's own output. NULL for nodes folded before these columns existed.
ALTER TABLE run_nodes ADD COLUMN IF NOT EXISTS thread text;
ALTER TABLE run_nodes ADD COLUMN IF NOT EXISTS compiled_code text;
-- dbt's artifacts of a run's last invocation, as dbt wrote them: name -> blob digest (the
-- artifacts route serves them until retention removes the run's files).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS artifacts jsonb;

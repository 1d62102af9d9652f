-- A run's kept log (run.log_kept) and whether retention removed its files (run.pruned).
-- A pruned run keeps its status, result and nodes: only the files are gone.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS log_object text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS log_lines integer;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS log_bytes bigint;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS files_pruned_at timestamptz;

-- Why a projection cannot go past its next batch, and since when (projections/loop.py): a
-- bug in a fold stops that fold instead of dead-lettering the events it fails on. Cleared
-- by the next checkpoint it writes.
ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS stopped text;
ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS stopped_since timestamptz;

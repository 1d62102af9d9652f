"""After the run: dbt's output mapped to node results, its artifacts and kept log stored, the
catalog published, retention applied. Nothing here decides whether a run passed."""

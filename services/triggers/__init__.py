"""The triggers service: starts saved jobs when a relation they read is written, or when
another job's run ends (services/triggers/manager.py)."""

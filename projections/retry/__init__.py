"""The retry projection: per principal, which run a retry would resume."""

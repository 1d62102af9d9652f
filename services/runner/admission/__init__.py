"""Admission: what a run must hold before dbt starts (its environment's lease, a team slot, a
run slot, the principal's publish budget). Nothing here runs dbt."""

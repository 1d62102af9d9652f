"""Reading the log itself, never a projection: a run's whole history for an auditor, and the log
exported as Parquet."""

"""The names of jetdbt's streams and buckets, in one place: what code calls the stores
streams.yaml declares (the contract says what each holds and how long)."""

from __future__ import annotations

__all__ = [
    "COMMANDS",
    "SCHEDULES_STREAM",
    "EVENTS",
    "LOGS",
    "INTAKE",
    "BLOBS",
    "LEASES",
    "PROJECTORS",
    "IDENTITY",
    "RETENTION",
    "HOOK_SECRETS",
]

# Streams.
COMMANDS = "DBT_COMMANDS"
SCHEDULES_STREAM = "DBT_SCHEDULES"  # the schedules' own stream (its subjects: subjects.SCHEDULES)
EVENTS = "DBT_EVENTS"
LOGS = "DBT_LOGS"
INTAKE = "DBT_INTAKE"  # external systems' declared writes, before a runner checks them
# The object store of blobs, named by digest.
BLOBS = "DBT_BLOBS"
# Key-value buckets.
LEASES = "DBT_LEASES"
PROJECTORS = "DBT_PROJECTORS"  # which projector process folds; the projectors' alone to write
IDENTITY = "DBT_IDENTITY"  # the operator's tokens and teams
RETENTION = "DBT_RETENTION"
HOOK_SECRETS = "DBT_HOOK_SECRETS"  # the notifier's alone

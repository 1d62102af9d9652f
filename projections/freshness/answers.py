"""What the freshness projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer
from jetdbt.shared.bus.events import Threshold


class SourceFreshness(Answer):
    """A source's last freshness check (a `source freshness` run): dbt's status (pass, warn,
    error, runtime error) and its outcome, its newest loaded_at, when dbt looked, the age in
    seconds between the two, the source's own thresholds, and the run that checked it."""

    status: str
    outcome: str
    message: str | None
    max_loaded_at: datetime | None
    snapshotted_at: datetime
    age_seconds: float | None
    warn_after: Threshold | None
    error_after: Threshold | None
    run_id: str

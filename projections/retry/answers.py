"""What the retry projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jetdbt.projections.answers import Answer, NextOffset


class RetryState(Answer):
    principal: str
    run_id: str
    attempt: int
    version: str
    command: dict[str, Any]
    args: dict[str, Any]
    saved_at: datetime


class RetryStates(Answer):
    project: str
    retry_state: list[RetryState]
    next: NextOffset | None

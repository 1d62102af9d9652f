"""What the upkeep projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextOffset


class DeadLetter(Answer):
    id: int
    projector: str
    stream_seq: int
    subject: str
    error: str
    failed_at: datetime
    data: str
    data_size: int


class DeadLetters(Answer):
    dead_letters: list[DeadLetter]
    next: NextOffset | None

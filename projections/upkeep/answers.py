"""What the reads of the projections' bookkeeping answer with, served as they are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextOffset

# The fields that are no column of a table (tables.py), with what each is made from.
COMPUTED = {
    "DeadLetter.data_size": "the stored bytes' length (data is cut to the first few)",
}


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

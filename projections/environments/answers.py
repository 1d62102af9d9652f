"""What the environments projection's queries answer with: the API serves these Structs as they
are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextOffset


class Environment(Answer):
    warehouse: str
    target: str
    schema: str
    database: str
    run_id: str
    version: str
    manifest_digest: str
    has_run_results: bool
    published_at: datetime


class Environments(Answer):
    project: str
    environments: list[Environment]
    next: NextOffset | None

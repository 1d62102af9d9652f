"""What the environments projection's queries answer with: the API serves these Structs as they
are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextOffset

# The fields that are no column of a table (tables.py), with what each is made from.
COMPUTED = {
    "Environment.schema": "the row's schema_name",
    "Environment.database": "the row's database_name",
    "Environment.has_run_results": "whether run_results_digest is set",
}


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

"""What the deploys projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jetdbt.projections.answers import Answer, NextOffset


class Deploy(Answer):
    deploy_id: str
    status: str
    version: str | None
    manifest_digest: str | None
    engine: str | None
    engine_version: str | None
    adapter: str | None
    adapter_version: str | None
    skipped: list[Any] | None
    reason: str | None
    requested_by: str | None
    at: datetime
    team: str | None = None  # the deployer's team, and the door its command came in by
    door: str | None = None
    source: list[str] | None = None  # the folder it came from, as the deploy named it


class Deploys(Answer):
    project: str
    deploys: list[Deploy]
    next: NextOffset | None

"""What the promotions projection's queries answer with: the API serves these Structs as they
are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextOffset


class SlotVersion(Answer):
    """What one slot of a project runs: an environment (`prod`), a person's own environment
    (`dev/<principal>`) or a pull request's check (`pr:<n>`), and the promotion that put the
    version there. `previous` is "" when the slot ran nothing before."""

    slot: str
    environment: str
    principal: str
    pr: int
    version: str
    previous: str
    deploy_id: str
    promoted_by: str
    promoted_at: datetime


class Versions(Answer):
    project: str
    versions: list[SlotVersion]
    next: NextOffset | None


class Promotions(Answer):
    """Promotions, newest first: each moved its slot from `previous` to `version`."""

    project: str
    promotions: list[SlotVersion]
    next: NextOffset | None

"""What the hooks projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextOffset

# The fields that are no column of a table (tables.py), with what each is made from.
COMPUTED = {
    "Hook.on": "the row's events",
}


class Hook(Answer):
    """A webhook (never its secret): where it posts, which run events, of which job."""

    name: str
    url: str
    on: list[str]
    job: str
    saved_by: str
    saved_at: datetime


class Hooks(Answer):
    project: str
    hooks: list[Hook]
    next: NextOffset | None


class HookDelivery(Answer):
    """One attempt of one delivery: the receiver's HTTP status (0: no answer), state
    (`delivered`, `retrying`, `dead`: the delivery gave up, a dead letter) and, when it
    failed, why: `answered N` or one of a fixed vocabulary (`no HTTP answer`, `timed out`,
    `TLS failed`, ...), never what the receiver sent."""

    delivery_id: str
    attempt: int
    run_id: str
    event: str
    status: int
    state: str
    error: str
    at: datetime


class HookDeliveries(Answer):
    project: str
    hook: str
    deliveries: list[HookDelivery]
    next: NextOffset | None

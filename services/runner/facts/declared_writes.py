"""Declared writes: checked from the intake, recorded as facts (or refused) by a runner.

An external system publishes `dbt.evt.relation.<relation>.materialized`; its NATS account
files the message in the intake stream under its own principal
(`dbt.in.<principal>.relation.<relation>.materialized`), so the publisher is what the
server vouches for, never what the payload says. A durable consumer shared by every runner
replica reads each write once and records it in the event log as RelationMaterialized
naming its publisher, or as RelationRefused with the reason: not a declared write, subject
and payload naming different relations, too large, a producer the publisher may not act
for, a warehouse nobody configured, or more than its share of the log this minute. Only
runners write the log, so nothing an external system sends is stored there as it sent it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC

import msgspec
from jetdbt.services.runner.admission.principal_rate import PrincipalRate
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.setup.warehouses import UnknownWarehouse, pick
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.streams import INTAKE
from jetdbt.shared.identity import principals
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from jetdbt.shared.runs.relations import InvalidRelation, parse
from jetdbt.shared.wording.short_quote import quote

__all__ = ["RelationWatch", "CONSUMER", "MAX_DECLARED_WRITE_BYTES"]

CONSUMER = "relation_watch"
# A declared write is a few hundred bytes; past this it is refused, naming the limit (the
# intake stream itself refuses anything past its max_msg_size, 64 KiB, at the server).
MAX_DECLARED_WRITE_BYTES = 16 * 1024


class Refusal(ValueError):
    """Why a declared write is not recorded."""


class RelationWatch:
    def __init__(self, ctx: RunnerContext):
        self.ctx = ctx
        self.log = jlog.get("relation_watch", runner=ctx.name)
        self.rate = PrincipalRate(ctx.settings.external_publishes_per_minute)

    async def verdict(self, data: bytes, subject: str, seq: int) -> ev.Event | None:
        """The fact or the refusal one intake message earns; None when it is dropped (its
        publisher is past its share of the log this minute, and was told once)."""
        try:
            publisher, relation_token = subjects.intake_publisher(subject)
        except subjects.InvalidName as exc:
            return ev.RelationRefused(relation="…", intake_seq=seq, reason=str(exc))
        refused = {
            "relation": subjects.filed_under(_untoken(relation_token)),
            "intake_seq": seq,
            "publisher": publisher,
        }
        admitted = self.rate.admit(publisher)
        if admitted == "drop":
            return None
        if admitted == "refuse":
            return ev.RelationRefused(**refused, reason=self.rate.reason(publisher))
        try:
            event = await self._checked(data, subject, publisher, relation_token)
        except Refusal as exc:
            return ev.RelationRefused(**refused, reason=str(exc))
        except (InvalidRelation, UnknownWarehouse) as exc:
            return ev.RelationRefused(**refused, reason=str(exc))
        team = await principals.team_of(self.ctx.bus, publisher)
        return msgspec.structs.replace(event, publisher=publisher, team=team)

    async def _checked(
        self, data: bytes, subject: str, publisher: str, relation_token: str
    ) -> ev.RelationMaterialized:
        if len(data) > MAX_DECLARED_WRITE_BYTES:
            raise Refusal(
                f"declared write of {len(data)} bytes; at most {MAX_DECLARED_WRITE_BYTES}"
            )
        try:
            event = ev.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Refusal(f"not a declared write: {exc}") from None
        if not isinstance(event, ev.RelationMaterialized):
            raise Refusal(
                f"not a declared write: a {event.__struct_config__.tag} payload on"
                f" {quote(subject)}; publish relation.materialized.v1 there"
            )
        if subjects.token(event.relation) != relation_token:
            raise Refusal(
                f"the subject names relation {quote(_untoken(relation_token))} but the payload"
                f" names {quote(event.relation)}: publish on"
                f" {subjects.relation_event(event.relation, 'materialized')}"
            )
        pick(self.ctx.warehouses, parse(event.relation).warehouse)
        await self._producer_check(event.producer, publisher)
        if event.at.tzinfo is None:  # a time without its offset is read as UTC, and kept so
            event = msgspec.structs.replace(event, at=event.at.replace(tzinfo=UTC))
        return event

    async def _producer_check(self, producer: str, publisher: str) -> None:
        """A publisher declares writes as itself, or for a project of its own team that
        its grants cover; never for another team's project."""
        if producer == publisher:
            return
        principal = await principals.load_principal(self.ctx.bus, publisher)
        team = await principals.project_team(self.ctx.bus, producer)
        covered = principal is not None and any(
            principals.project_matches(g.project, producer) for g in principal.grants
        )
        if principal is None or not team or team != principal.team or not covered:
            raise Refusal(
                f"producer {quote(producer)} is not {publisher!r} nor a project of its team"
                f" that it may act for: a declared write names its publisher, or one of"
                " its team's projects its grants cover"
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Check writes until `stop`; a failure (NATS away) resumes from the durable consumer."""
        await supervise.forever(self._run_once, stop, self.log, "relation_watch_failed")

    async def _run_once(self, stop: asyncio.Event) -> None:
        await supervise.each_message(self.ctx.bus.js, CONSUMER, INTAKE, stop, self._check)

    async def _check(self, msg) -> None:
        seq = msg.metadata.sequence.stream
        found = await self.verdict(msg.data, msg.subject, seq)
        if found is None:
            self.log.warning("declared_write_dropped", intake_seq=seq)
        elif isinstance(found, ev.RelationRefused):
            self.log.info("relation_write_refused", reason=found.reason)
            await self.ctx.bus.publish(found)
        else:
            await self.ctx.bus.publish(found)


def _untoken(tok: str) -> str:
    try:
        return subjects.untoken(tok)
    except ValueError:
        return tok

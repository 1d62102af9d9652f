"""Refuse declared writes that name no configured warehouse.

A relation under a warehouse nobody configured is not a namespace: it strands the
write on a node nothing else reaches. Only runners know the warehouses and
projectors never publish, so the check lives runner-side: a durable consumer
shared by every runner replica reads each declared write once and publishes
RelationRefused naming the write's stream sequence; the graph fold marks it.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec

from services.runner.context import RunnerContext
from services.runner.warehouses import UnknownWarehouse, pick
from shared import events as ev
from shared import logging as jlog
from shared import subjects, supervise
from shared.bus import EVENTS
from shared.relations import InvalidRelation, parse

__all__ = ["RelationWatch", "CONSUMER"]

CONSUMER = "relation_watch"
BATCH = 64


class RelationWatch:
    def __init__(self, ctx: RunnerContext):
        self.ctx = ctx
        self.log = jlog.get("relation_watch", runner=ctx.name)

    def refusal(self, data: bytes, subject: str, seq: int) -> ev.RelationRefused | None:
        """The refusal a declared write earns, or None when it names a configured warehouse."""
        try:
            event = ev.decode(data)
            if not isinstance(event, ev.RelationMaterialized):
                raise msgspec.ValidationError(f"expected relation.materialized.v1 on {subject}")
            pick(self.ctx.warehouses, parse(event.relation).warehouse)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return ev.RelationRefused(
                relation=subjects.filed_under(subjects.subject_key(subject)),
                write_seq=seq,
                reason=f"not a declared write: {exc}",
            )
        except (InvalidRelation, UnknownWarehouse) as exc:
            return ev.RelationRefused(
                relation=subjects.filed_under(event.relation),
                producer=event.producer,
                write_seq=seq,
                reason=str(exc),
            )
        return None

    async def run(self, stop: asyncio.Event) -> None:
        """Check writes until `stop`; a failure (NATS away) resumes from the durable consumer."""
        await supervise.forever(self._run_once, stop, self.log, "relation_watch_failed")

    async def _run_once(self, stop: asyncio.Event) -> None:
        sub = await self.ctx.bus.js.pull_subscribe_bind(CONSUMER, stream=EVENTS)
        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(BATCH, timeout=0.5)
                except TimeoutError:
                    continue
                for msg in msgs:
                    refused = self.refusal(msg.data, msg.subject, msg.metadata.sequence.stream)
                    if refused is not None:
                        self.log.info("relation_write_refused", reason=refused.reason)
                        await self.ctx.bus.publish(refused)
                    await msg.ack()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

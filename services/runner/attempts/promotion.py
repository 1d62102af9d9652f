"""Promotion: a slot of a project (an environment, a person's own, a pull request's check)
made to run a deployed version, said by a Promoted event. A deploy promotes the version it
made; the promote verb (promote.py) any version deployed before.
"""

from __future__ import annotations

from jetdbt.shared.blobs.digests import short_digest
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Raced
from jetdbt.shared.project import slot_versions
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT

__all__ = ["Superseded", "keep_default", "move"]

# How many times a promotion reads its slot again when another promotion landed first.
RACES = 5


class Superseded(ValueError):
    """A promotion submitted before the one its slot holds: it changes nothing."""


async def keep_default(bus, project: str) -> None:
    """Before environments, the last deploy was the default environment's version
    (slot_versions.held_by reads it so while the environment has no promotion). A version
    deployed now makes itself current nowhere, so before the first one that does not go
    into the default environment, the old version is promoted into it as an event."""
    if await slot_versions.promotion_of(bus, project, DEFAULT_ENVIRONMENT) is not None:
        return
    found = await bus.last_stored(subjects.deploy_event(project, "deployed"))
    if found is None or not isinstance(found[0], ev.Deployed) or not found[0].current:
        return
    last, seq = found
    await bus.publish(
        ev.Promoted(
            project=project,
            environment=DEFAULT_ENVIRONMENT,
            version=last.version,
            deployed_seq=seq,
            deploy_id=last.deploy_id,
            requested_by=last.requested_by,
            command_seq=last.command_seq,
        )
    )


async def move(
    bus,
    project: str,
    slot: slot_versions.Slot,
    deployed: ev.Deployed,
    deployed_seq: int,
    *,
    requested_by: str,
    command_seq: int,
    deploy_id: str,
    superseded: bool = True,
) -> ev.Promoted | None:
    """Promote a version into `slot`; None when the slot runs it already. With `superseded`,
    a slot a command submitted after this one promoted raises Superseded. Another promotion
    of the slot landing between reading it and publishing this one makes it read again, so
    `previous` is always what the slot ran just before (two promotions at once)."""
    if slot.name() != DEFAULT_ENVIRONMENT:
        await keep_default(bus, project)
    for _ in range(RACES):
        found = await bus.last_stored(subjects.promotion_event(project, slot.name()))
        last, seen = found if found is not None else (None, 0)
        own = last if isinstance(last, ev.Promoted) else None
        if superseded and own is not None and own.command_seq > command_seq:
            raise Superseded(
                f"superseded: {slot.name()} of project {project!r} was promoted to version"
                f" {short_digest(own.version)} by a command submitted after this one"
            )
        previous = own.version if own is not None else await _followed(bus, project, slot)
        # A slot that only follows the default environment's version is not moved to it:
        # promoting it pins it there, so it stays when the default moves on.
        if previous == deployed.version and (own is not None or slot.name() == DEFAULT_ENVIRONMENT):
            return None
        event = ev.Promoted(
            project=project,
            environment=slot.environment,
            principal=slot.principal,
            pr=slot.pr,
            version=deployed.version,
            previous=previous,
            deployed_seq=deployed_seq,
            deploy_id=deploy_id,
            requested_by=requested_by,
            command_seq=command_seq,
        )
        try:
            await bus.publish(event, after=seen)
        except Raced:
            continue
        return event
    raise Raced(f"{slot.name()} of project {project!r} kept moving; promote again")


async def _followed(bus, project: str, slot: slot_versions.Slot) -> str:
    """The version a slot with no promotion of its own runs ("": none)."""
    held = await slot_versions.held_by(bus, project, slot.name())
    return held.version if held is not None else ""

"""Promotion: a slot of a project (an environment, a person's own, a pull request's check)
made to run a deployed version, said by a Promoted event. A deploy promotes the version it
made; the promote verb (promote.py) any version deployed before.
"""

from __future__ import annotations

from shared import events as ev
from shared import subjects, versions
from shared.descriptor import DEFAULT_ENVIRONMENT

__all__ = ["keep_default", "move", "previous_of", "promoted"]


async def keep_default(bus, project: str) -> None:
    """Before environments, the last deploy was the default environment's version
    (versions.held_by reads it so while the environment has no promotion). A version
    deployed now makes itself current nowhere, so before the first one that does not go
    into the default environment, the old version is promoted into it as an event."""
    if await versions.promotion_of(bus, project, DEFAULT_ENVIRONMENT) is not None:
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


async def previous_of(bus, project: str, slot: versions.Slot) -> str:
    """The version `slot` runs before a promotion ("": none); read before the version's
    Deployed event is published, which would end an old log's default fallback."""
    if slot.name() != DEFAULT_ENVIRONMENT:
        await keep_default(bus, project)
    held = await versions.held_by(bus, project, slot.name())
    return held.version if held is not None else ""


def promoted(
    project: str,
    slot: versions.Slot,
    deployed: ev.Deployed,
    deployed_seq: int,
    *,
    previous: str,
    requested_by: str,
    command_seq: int,
    deploy_id: str,
) -> ev.Promoted:
    """The event moving `slot` from `previous` to `deployed`'s version; `deploy_id` the
    deploy that promotes it ("": a promote command)."""
    return ev.Promoted(
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


async def move(
    bus,
    project: str,
    slot: versions.Slot,
    deployed: ev.Deployed,
    deployed_seq: int,
    *,
    requested_by: str,
    command_seq: int,
    deploy_id: str,
) -> ev.Promoted | None:
    """Promote a version deployed before into `slot`; None when the slot runs it already."""
    previous = await previous_of(bus, project, slot)
    if previous == deployed.version:
        return None
    event = promoted(
        project,
        slot,
        deployed,
        deployed_seq,
        previous=previous,
        requested_by=requested_by,
        command_seq=command_seq,
        deploy_id=deploy_id,
    )
    await bus.publish(event)
    return event

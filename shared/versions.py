"""Which deployed version a slot of a project runs (shared.events.promotion_slot): read from
the log, never a projection, by the runner that runs it and by the doors that check it.

A slot runs the version its last promotion names. Before environments a deploy was the
current version, so a project's default environment with no promotion yet runs its last
deployed version when that deploy made itself current (Deployed.current); an environment
with none runs the default one's until a version is promoted into it; a pull request's
slot runs only what its check uploaded.
"""

from __future__ import annotations

from shared import events as ev
from shared import subjects
from shared.descriptor import DEFAULT_ENVIRONMENT

__all__ = ["held_by", "promotion_of"]


async def promotion_of(bus, project: str, slot: str) -> ev.Promoted | None:
    """The slot's last promotion, None when nothing was ever promoted into it."""
    found = await bus.last_event(subjects.promotion_event(project, slot))
    return found if isinstance(found, ev.Promoted) else None


async def held_by(bus, project: str, slot: str) -> ev.Deployed | None:
    """The Deployed event of the version `slot` runs now, None when it runs none."""
    promoted = await promotion_of(bus, project, slot)
    if promoted is not None:
        found = await bus.event_at(promoted.deployed_seq)
        if isinstance(found, ev.Deployed) and found.project == project:
            return found if found.version == promoted.version else None
        return None
    if slot == DEFAULT_ENVIRONMENT:
        last = await bus.last_event(subjects.deploy_event(project, "deployed"))
        return last if isinstance(last, ev.Deployed) and last.current else None
    if ":" in slot:
        return None
    return await held_by(bus, project, DEFAULT_ENVIRONMENT)

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

__all__ = ["held_by", "promotion_of", "slot_for_run", "nothing_held"]


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


async def slot_for_run(bus, project: str, environment: str, principal: str, pr: int) -> str:
    """The slot a run reads its version from: a pull request's check its PR's own; otherwise
    the caller's own slot of `environment` once a version was promoted into it, else the
    environment's (which runs the default's until one is promoted into it)."""
    if pr:
        return ev.promotion_slot(environment, pr=pr)
    own = ev.promotion_slot(environment, principal)
    if principal and await promotion_of(bus, project, own) is not None:
        return own
    return ev.promotion_slot(environment)


def nothing_held(project: str, slot: str) -> str:
    """Why a run of `slot` cannot start when the slot holds no version, and what to do."""
    if slot.startswith("pr:"):
        pr = slot.removeprefix("pr:")
        return (
            f"pull request {pr} of project {project!r} uploaded no version;"
            f" check it first: jetdbt ci PATH --pr {pr} --project {project}"
        )
    return (
        f"project {project!r} has no deployed version;"
        f" deploy it first: jetdbt deploy PATH --project {project}"
    )

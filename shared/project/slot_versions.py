"""Which deployed version a slot of a project runs (jetdbt.shared.bus.events.promotion_slot): read
from the log, never a projection, by the runner that runs it and by the doors that check it.

A slot runs the version its last promotion names. Before environments a deploy was the
current version, so a project's default environment with no promotion yet runs its last
deployed version when that deploy made itself current (Deployed.current); an environment
with none runs the default one's until a version is promoted into it; a pull request's
slot runs only what its check uploaded.
"""

from __future__ import annotations

from typing import NamedTuple

from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.project.descriptor import (
    DEFAULT_ENVIRONMENT,
    Descriptor,
    environment_names,
    personal_environments,
    unknown_environment,
)

__all__ = [
    "held_by",
    "promotion_of",
    "environments_of",
    "slot_for",
    "Slot",
    "slot_for_run",
    "nothing_held",
]


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


def environments_of(deployed: ev.Deployed) -> tuple[list[str], list[str]]:
    """The environments a deployed version's descriptor has, and its personal ones; a version
    deployed before environments has an empty descriptor's."""
    if deployed.environments:
        return deployed.environments, deployed.personal_environments
    empty = Descriptor()
    return environment_names(empty), personal_environments(empty)


class Slot(NamedTuple):
    """A slot by its parts, as a Promoted event carries them."""

    environment: str
    principal: str = ""
    pr: int = 0

    def name(self) -> str:
        return ev.promotion_slot(self.environment, self.principal, self.pr)


def slot_for(
    environments: tuple[list[str], list[str]], environment: str, principal: str, pr: int = 0
) -> Slot:
    """The slot a promotion into `environment` ("": the default) for `principal` moves, for a
    version with `environments` (every name, the personal ones: environments_of): a pull
    request's own, that person's own in a personal environment, else the environment. One
    the version does not have raises DescriptorError naming those it has."""
    if pr:
        return Slot("", pr=pr)
    name = environment or DEFAULT_ENVIRONMENT
    names, personal = environments
    if name not in names:
        raise unknown_environment(name, names)
    return Slot(name, principal if name in personal else "")


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

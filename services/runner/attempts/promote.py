"""The promote verb: make a slot of a project run a version deployed before, found in the
log (every Deployed event of the project). Moving a slot back to an older version is the
rollback. Refusals are DeployRefused events under the command's own id (`c<seq>`);
promoting the version a slot already runs changes nothing and says so (DeployUnchanged).
"""

from __future__ import annotations

import contextlib

import msgspec
from jetdbt.services.runner.attempts import promotion
from jetdbt.shared.blobs.digests import short_digest
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.stream_batches import Slice
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.identity import principals
from jetdbt.shared.project import slot_versions
from jetdbt.shared.project.descriptor import DescriptorError

__all__ = ["promote", "find_version"]

# Versions a refusal lists, newest first.
LISTED = 10


async def promote(bus, msg, project: str, problem: str | None, seq: int, caller) -> ev.Event:
    """Check and carry out one promote command; returns the event it published."""
    command_id = f"c{seq}"
    body = None
    try:
        body = commands.decode_promote(msg.data)
        problem = problem or principals.claim_problem(body.requested_by, caller.principal)
    except commands.CommandRejected as exc:
        problem = problem or str(exc)
    if problem is None:
        owner = await principals.project_team(bus, project)
        problem = principals.command_problem(caller, "promote", project, owner)
    if problem is None:
        found = await find_version(bus, project, body.version)
        if isinstance(found, str):
            problem = found
    if problem is None:
        deployed, deployed_seq = found
        try:
            slot = slot_versions.slot_for(
                slot_versions.environments_of(deployed), body.environment, caller.principal
            )
        except DescriptorError as exc:
            problem = f"version {short_digest(deployed.version)}: {exc}"
    if problem is None:
        try:
            moved = await promotion.move(
                bus,
                project,
                slot,
                deployed,
                deployed_seq,
                requested_by=caller.principal,
                command_seq=seq,
                deploy_id="",
            )
        except promotion.Superseded as exc:
            problem = str(exc)
    if problem is not None:
        return await _said(
            bus, ev.DeployRefused(project=project, deploy_id=command_id, reason=problem)
        )
    if moved is not None:
        return moved
    return await _said(
        bus, ev.DeployUnchanged(project=project, deploy_id=command_id, version=deployed.version)
    )


async def _said(bus, event: ev.Event) -> ev.Event:
    await bus.publish(event)
    return event


async def find_version(bus, project: str, version: str) -> tuple[ev.Deployed, int] | str:
    """The project's newest Deployed event of the one version `version` (a digest or a
    prefix of one) names, with its stream sequence; else why not, naming the candidates."""
    wanted = version if version.startswith("sha256:") else f"sha256:{version}"
    newest: dict[str, tuple[ev.Deployed, int]] = {}
    async with Slice(bus.js, EVENTS, subjects.deploy_event(project, "deployed")) as stored:
        async for batch in stored:
            for seq, msg in batch:
                with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                    event = ev.decode(msg.data)
                    if isinstance(event, ev.Deployed) and event.project == project:
                        newest.pop(event.version, None)
                        newest[event.version] = (event, seq)
    matching = [v for v in newest if v.startswith(wanted)]
    if len(matching) == 1:
        return newest[matching[0]]
    listed = ", ".join(short_digest(v) for v in reversed(list(newest)[-LISTED:]))
    if not newest:
        return (
            f"project {project!r} has no deployed version; deploy it first:"
            f" jetdbt deploy PATH --project {project}"
        )
    if not matching:
        return (
            f"project {project!r} has no deployed version {version[:80]!r}; its versions,"
            f" newest first: {listed}"
        )
    # Four digits past the prefix given: enough to tell the versions it names apart.
    width = len("sha256:") + len(version.removeprefix("sha256:")) + 4
    named = ", ".join(v[:width] for v in matching[:LISTED])
    return (
        f"version {version!r} names {len(matching)} deployed versions of project"
        f" {project!r} ({named}); give more of its digest"
    )

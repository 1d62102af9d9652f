"""Talking to a running stack over NATS: what the CLI, the demo and the tests share.

A command is published on `dbt.cmd.<verb>.<project>.<principal>` exactly as any
other system would; the answer is read from the event subjects, subscribed before
the command goes out so no event can be missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import yaml
from jetdbt.services.cli.plural import counted
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process import config
from jetdbt.shared.project import bundle, uploads

__all__ = [
    "CommandNotStored",
    "deploy",
    "promote",
    "run",
    "project_name",
    "principal",
    "DEPLOY_FINAL",
]

DEPLOY_FINAL = (ev.Deployed, ev.DeployUnchanged, ev.DeployFailed, ev.DeployRefused)


class CommandNotStored(RuntimeError):
    """The server refused to store a command (its size, a permission): no runner will ever
    answer it, so waiting would be forever."""


def principal() -> str:
    """Who this process's commands speak for: JETDBT_PRINCIPAL, else the login name."""
    chosen = config.load().principal
    if chosen:
        return chosen
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def project_name(path: Path, given: str | None) -> str:
    """--project, else dbt_project.yml's name when it is a valid project name."""
    if given:
        return subjects.check_project(given)
    doc = yaml.safe_load(bundle.project_file(path).read_text()) or {}
    name = str(doc.get("name", ""))
    try:
        return subjects.check_project(name)
    except subjects.InvalidName as exc:
        raise subjects.InvalidName(f"{exc}; name the project with --project") from None


async def _await_final(
    bus: Bus,
    pattern: str,
    publish: Callable[[], Awaitable[object]],
    wanted: Callable[[ev.Event, object], bool],
    final: tuple | Callable[[ev.Event], bool],
    on_event: Callable[[ev.Event], Awaitable[None]] | None,
    timeout: float | None,
) -> ev.Event:
    """Follow `pattern`, publish, and read the events `wanted` of the publish's ack until one
    is `final` (a tuple of event types, or a predicate)."""
    done = final if callable(final) else (lambda event: isinstance(event, final))
    queue: asyncio.Queue = asyncio.Queue()

    async def collect(msg) -> None:
        queue.put_nowait(msg.data)

    from nats.errors import ConnectionClosedError
    from nats.js.errors import APIError

    sub = await bus.follow(pattern, collect)
    try:
        try:
            ack = await publish()
        except APIError as exc:
            raise CommandNotStored(
                f"the NATS server refused the command: {exc.description or exc}"
            ) from None
        async with asyncio.timeout(timeout):
            while True:
                event = ev.decode(await bus.until_gone(queue.get()))
                if not wanted(event, ack):
                    continue
                if on_event is not None:
                    await on_event(event)
                if done(event):
                    return event
    finally:
        with contextlib.suppress(ConnectionClosedError):  # nothing to unsubscribe from
            await sub.unsubscribe()


async def deploy(
    bus: Bus,
    path: Path,
    project: str,
    *,
    requested_by: str = "",
    timeout: float | None = 900,
    packed: bundle.Packed | None = None,
    say: Callable[[str], None] | None = None,
    source: list[str] | None = None,
    replace_source: bool = False,
    environment: str = "",
    promote: bool = True,
    pr: int = 0,
    on_promoted: Callable[[ev.Promoted], None] | None = None,
) -> tuple[bundle.Packed, ev.Event]:
    """Pack (unless given `packed`), store the bundle, publish the deploy command, wait for
    its final event (a version's every file read, wherever they travelled) and, when it
    promotes its version (into `environment`, "" the default one; a pull request's `pr`
    into its own slot; none when `promote` is false), for its promotion, which
    `on_promoted` hears. `say` hears each step as it starts: a deploy waits on a runner and
    on dbt, and should say so. `source` names the folder it comes from
    (services/cli/deploy_source.py), `replace_source` lets it replace the project's."""
    say = say or (lambda _: None)
    packed = packed or bundle.pack(path)
    say(f"uploading the bundle ({counted(len(packed.files), 'file')}, {packed.size:,} bytes)")
    digest = await bus.put_blob(packed.data)
    deploy_id = uuid.uuid4().hex
    await uploads.record(bus, deploy_id, digest)
    cmd = commands.DeployCommand(
        bundle_digest=digest,
        bundle_size=packed.size,
        skipped=packed.skipped[: commands.MAX_SKIPPED_LISTED],
        skipped_count=len(packed.skipped),
        deploy_id=deploy_id,
        requested_by=requested_by or principal(),
        source=source or [],
        replace_source=replace_source,
        environment=environment,
        promote=promote,
        pr=pr,
    )
    heard: list[ev.Event] = []

    async def hear(event: ev.Event) -> None:
        heard.append(event)
        if isinstance(event, ev.Promoted) and on_promoted is not None:
            on_promoted(event)

    def done(event: ev.Event) -> bool:
        # A new version's promotion follows its Deployed event; an unchanged one's precedes.
        if isinstance(event, ev.Promoted):
            return any(isinstance(e, ev.Deployed) for e in heard)
        if isinstance(event, ev.Deployed):
            return not (promote or pr)
        return isinstance(event, DEPLOY_FINAL)

    say(f"deploying {project} {digest[:19]}: a runner runs dbt deps and dbt parse")
    await _await_final(
        bus,
        subjects.deploy_pattern(project),
        lambda: bus.publish_command("deploy", project, cmd, deploy_id, principal=cmd.requested_by),
        # A deploy refused before it started is filed under its command's own id.
        lambda e, ack: getattr(e, "deploy_id", None) in (deploy_id, f"c{ack.seq}"),
        done,
        hear,
        timeout,
    )
    final = next(e for e in heard if isinstance(e, DEPLOY_FINAL))
    return packed, await event_blobs.resolved(bus, final)


async def promote(
    bus: Bus, project: str, command: commands.PromoteCommand, *, timeout: float | None = 120
) -> ev.Event:
    """Publish a promote command and wait for its Promoted event, or the DeployRefused or
    DeployUnchanged filed under its command's id."""
    command = msgspec.structs.replace(command, requested_by=command.requested_by or principal())
    return await _await_final(
        bus,
        subjects.deploy_pattern(project),
        lambda: bus.publish_command(
            "promote", project, command, uuid.uuid4().hex, principal=command.requested_by
        ),
        lambda e, ack: (
            isinstance(e, ev.Promoted)
            and e.command_seq == ack.seq
            or isinstance(e, ev.DeployRefused | ev.DeployUnchanged)
            and e.deploy_id == f"c{ack.seq}"
        ),
        (ev.Promoted, ev.DeployRefused, ev.DeployUnchanged),
        None,
        timeout,
    )


async def run(
    bus: Bus,
    project: str,
    command: commands.RunCommand,
    *,
    on_event: Callable[[ev.Event], Awaitable[None]] | None = None,
    timeout: float | None = None,
) -> ev.Event:
    """Publish a run command and follow its events to RunFinished (its every node read,
    wherever they travelled) or RunRefused."""
    run_id = command.run_id or uuid.uuid4().hex
    command = msgspec.structs.replace(
        command, run_id=run_id, requested_by=command.requested_by or principal()
    )
    final = await _await_final(
        bus,
        subjects.run_pattern(project, run_id),
        lambda: bus.publish_command(
            "run", project, command, run_id, principal=command.requested_by
        ),
        lambda e, ack: getattr(e, "run_id", None) == run_id,
        ev.RUN_ENDS,
        on_event,
        timeout,
    )
    return await event_blobs.resolved(bus, final)


# A job command's fact, by action: what says it was done (or a JobRefused, why not).
_JOB_DONE = {
    "save": ev.JobSaved,
    "delete": ev.JobDeleted,
    "schedule": ev.ScheduleSaved,
    "pause": ev.ScheduleSaved,
    "resume": ev.ScheduleSaved,
    "unschedule": ev.ScheduleSaved,
}


async def job(
    bus: Bus, project: str, command: commands.JobCommand, *, timeout: float | None = 60
) -> ev.Event:
    """Publish a job command and wait for the fact it makes, or its JobRefused."""
    command = msgspec.structs.replace(command, requested_by=command.requested_by or principal())
    done = (_JOB_DONE[command.action], ev.JobRefused)
    return await _await_final(
        bus,
        subjects.project_pattern(project),
        lambda: bus.publish_command(
            "job", project, command, uuid.uuid4().hex, principal=command.requested_by
        ),
        lambda e, ack: isinstance(e, done) and getattr(e, "command_seq", None) == ack.seq,
        done,
        None,
        timeout,
    )

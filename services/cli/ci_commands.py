"""`jetdbt ci PATH --pr N` and `jetdbt ci close --pr N --project NAME`: a pull request's
check, as a CI job runs it on each push and when the PR closes.

A check deploys the PR's folder as the PR's own version (promoted into no environment, only
into the PR's slot: a later push replaces it), then builds `state:modified+` (or the given
selection) into the PR's own schema, deferring to the target environment's published state,
so only what differs from that environment is built. When the environment has no state yet
there is nothing to compare with or defer to: the whole selection is built, and the summary
says so, as a first CI run of a dbt Cloud project with no production run builds everything.
Exit codes are for the CI system: 0 passed, 1 failed, 3 refused (the deploy or the run).
The check goes over NATS (the CLI's own user), or with `--api` through the query API with
JETDBT_TOKEN (services/cli/ci_api.py): the same steps, summary and exit codes either way.

Closing drops the PR's schema with every relation in it: a run on a runner (the warehouse is
its), whose plan alone names the schema (jetdbt.shared.bus.commands.ClosePrCommand).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import msgspec
from jetdbt.services.cli import client
from jetdbt.services.cli.ci_api import ApiDoor
from jetdbt.services.cli.ci_ends import DeployEnd, FailedNode, RunEnd, dropped_relations
from jetdbt.services.cli.common import EXIT_FAILED, EXIT_REFUSED, CliError, open_bus
from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.run_commands import deploy_folder, say, waited
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import BuildCommand, ClosePrCommand, RunCommand
from jetdbt.shared.process.config import Settings
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.project.environments import NO_STATE
from jetdbt.shared.runs import run_logs, run_status

__all__ = ["CheckResult", "CloseResult", "cmd_ci"]

# What a check builds when no selection is given: what differs from the environment, and
# everything downstream of it.
MODIFIED = ["state:modified+"]


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    """What `jetdbt ci --json` prints: the check's outcome and where it built."""

    project: str
    pr: int
    environment: str
    status: str  # passed, failed, refused (the deploy's or the run's)
    version: str = ""
    run_id: str = ""
    schema: str | None = None
    deferred_to: str | None = None  # the run whose published state the build deferred to
    whole_selection: bool = False  # the environment had no state: nothing was compared
    totals: dict[str, int] = {}
    failed: list[FailedNode] = []
    reason: str | None = None


class CloseResult(msgspec.Struct, frozen=True, kw_only=True):
    """What `jetdbt ci close --json` prints: the schema dropped and what it held."""

    project: str
    pr: int
    status: str
    run_id: str = ""
    schema: str | None = None
    dropped: list[str] = []
    reason: str | None = None


async def cmd_ci(args, settings: Settings) -> int:
    if args.api is not None:
        door = ApiDoor(settings, args.api or None, args.timeout)
    else:
        door = _NatsDoor(settings, args.timeout)
    if args.path == "close":
        if not args.project:
            raise CliError("ci close needs --project NAME: the project whose PR schema it drops")
        return await _close(args, door, subjects.check_project(args.project))
    return await _check(args, door)


async def _check(args, door) -> int:
    path = Path(args.path)
    project = client.project_name(path, args.project)
    environment = args.env or ""
    result = CheckResult(
        project=project, pr=args.pr, environment=environment or DEFAULT_ENVIRONMENT, status=""
    )
    final = await door.deploy(path, project, args.pr)
    if not final.went():
        reason = f"the deploy of pull request {args.pr} {final.status}: {final.reason}"
        _print_check(args, msgspec.structs.replace(result, status=final.status, reason=reason))
        return _exit_code(final.status)
    result = msgspec.structs.replace(result, version=final.version)
    given = args.select or []
    build = BuildCommand(select=given or MODIFIED, exclude=args.exclude or [], defer=True)
    ended = await _run(args, door, project, _check_run(build, environment, args.pr))
    if ended.status == run_status.REFUSED and NO_STATE in (ended.reason or ""):
        say(
            f"environment {result.environment!r} has no published state to compare with or"
            " defer to: building the whole selection"
        )
        whole = [s for s in given if not s.startswith("state:")]
        build = msgspec.structs.replace(build, select=whole, defer=False)
        result = msgspec.structs.replace(result, whole_selection=True)
        ended = await _run(args, door, project, _check_run(build, environment, args.pr))
    # Every field of the run's end is the check result's own.
    result = msgspec.structs.replace(result, **msgspec.structs.asdict(ended))
    _print_check(args, result)
    return _exit_code(result.status)


def _check_run(build: BuildCommand, environment: str, pr: int) -> RunCommand:
    return RunCommand(command=build, environment=environment, pr=pr)


def _ended(ended: ev.Event) -> RunEnd:
    """A run's final event (RunFinished or RunRefused) as the check reads it."""
    if isinstance(ended, ev.RunRefused):
        return RunEnd(run_id=ended.run_id, status=run_status.REFUSED, reason=ended.reason)
    run = ended.result
    failed = [
        FailedNode(unique_id=n.unique_id, message=n.message)
        for n in run.nodes
        if n.outcome == "failed"
    ]
    return RunEnd(
        run_id=ended.run_id,
        status=run.status,
        reason=run.error,
        schema=run.schema,
        deferred_to=run.deferred_to,
        totals=run.totals,
        failed=failed,
    )


async def _close(args, door, project: str) -> int:
    environment = args.env or ""
    command = RunCommand(command=ClosePrCommand(), environment=environment, pr=args.pr)
    ended = await _run(args, door, project, command)
    result = CloseResult(
        project=project,
        pr=args.pr,
        status=ended.status,
        run_id=ended.run_id,
        schema=ended.schema,
        reason=ended.reason,
    )
    if ended.status != run_status.REFUSED:
        dropped = await door.dropped(ended.run_id)
        result = msgspec.structs.replace(result, dropped=dropped)
    if args.json:
        print(msgspec.json.encode(result).decode())
    elif result.status == run_status.PASSED:
        held = f": {counted(len(result.dropped), 'relation')} ({', '.join(result.dropped)})"
        print(
            f"closed pull request {args.pr} of {project}: dropped schema {result.schema}"
            + (held if result.dropped else " (it held nothing)")
        )
    else:
        print(
            f"ci close of pull request {args.pr} {result.status}: {result.reason}", file=sys.stderr
        )
    return _exit_code(result.status)


async def _run(args, door, project: str, command: RunCommand) -> RunEnd:
    """Publish the pull request's run through `door` and wait for its end."""
    command = msgspec.structs.replace(command, run_id=uuid.uuid4().hex)
    say(f"run {command.run_id} of pull request {args.pr}: {command.command.label}")
    return await door.run(project, command)


class _NatsDoor:
    """The check over NATS, as the CLI's own user."""

    def __init__(self, settings: Settings, timeout: float) -> None:
        self.settings = settings
        self.timeout = timeout

    async def deploy(self, path: Path, project: str, pr: int) -> DeployEnd:
        final = await deploy_folder(path, project, self.settings, out=sys.stderr, pr=pr)
        if isinstance(final, ev.DeployRefused | ev.DeployFailed):
            word = run_status.REFUSED if isinstance(final, ev.DeployRefused) else run_status.FAILED
            return DeployEnd(status=word, reason=final.reason)
        return DeployEnd(status="deployed", version=final.version)

    async def run(self, project: str, command: RunCommand) -> RunEnd:
        bus = await open_bus(self.settings)
        try:
            ended = await waited(
                client.run(bus, project, command),
                self.timeout,
                f"run {command.run_id} of project {project!r}",
            )
        finally:
            await bus.close()
        return _ended(ended)

    async def dropped(self, run_id: str) -> list[str]:
        bus = await open_bus(self.settings)
        try:
            found = await run_logs.find(bus, run_id)
            if found is None:
                return []
            lines = [line.text async for line in found.lines()]
        except run_logs.LogGone:
            return []
        finally:
            await bus.close()
        return dropped_relations(lines)


def _print_check(args, result: CheckResult) -> None:
    if args.json:
        print(msgspec.json.encode(result).decode())
        return
    lines = [f"pull request {result.pr} of {result.project}: {result.status}"]
    if result.version:
        lines.append(f"  version      {result.version[:19]}")
    if result.schema:
        lines.append(f"  built in     schema {result.schema}")
    if result.whole_selection:
        lines.append(f"  deferred to  nothing: {result.environment} has no published state yet")
    elif result.deferred_to:
        lines.append(f"  deferred to  {result.environment}, the state of run {result.deferred_to}")
    if result.totals:
        counted = ", ".join(f"{count} {name}" for name, count in result.totals.items() if count)
        lines.append(f"  nodes        {counted or 'none built: nothing differs'}")
    lines += [f"  failed       {node.unique_id}: {node.message}" for node in result.failed]
    if result.run_id:
        lines.append(f"  run id       {result.run_id}")
    if result.reason and not result.failed:
        lines.append(f"  reason       {result.reason}")
    print("\n".join(lines))


def _exit_code(status: str) -> int:
    if status == run_status.PASSED:
        return 0
    return EXIT_REFUSED if status == run_status.REFUSED else EXIT_FAILED

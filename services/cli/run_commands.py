"""Commands that publish on NATS as any other system would: deploy, run, parse, retry."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode

import msgspec
import yaml
from jetdbt.services.cli import client
from jetdbt.services.cli.common import (
    EXIT_FAILED,
    EXIT_REFUSED,
    ApiAnswered,
    CliError,
    api_json,
    endpoints,
    open_bus,
)
from jetdbt.services.cli.deploy_source import marks
from jetdbt.services.cli.graph_summary import graph_lines, warning_lines
from jetdbt.services.cli.overlaps import check_overlaps
from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.watch import Progress, Tally, result_table, styled
from jetdbt.shared.blobs.digests import short_digest
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import (
    BuildCommand,
    ParseCommand,
    PromoteCommand,
    RetryCommand,
    RunCommand,
    dbt_command,
)
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process.config import Settings
from jetdbt.shared.project import bundle, slot_versions
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs import planned, run_logs, run_status

__all__ = [
    "cmd_deploy",
    "cmd_promote",
    "cmd_run",
    "cmd_parse",
    "cmd_retry",
    "deploy_folder",
    "packed_folder",
    "promotion_line",
    "say",
    "waited",
]


# Up to this many skipped files are named one a line; more are summarised per reason.
SKIPPED_SHOWN = 10
# How long a parse's graph may take to be folded after the parse ended, in seconds.
GRAPH_WAIT = 15.0


def say(text: str) -> None:
    """A step of a deploy, on stderr: stdout keeps what a script reads (skips, the result)."""
    print(f"jetdbt: {text}", file=sys.stderr, flush=True)


def _skipped_lines(skipped: list[bundle.Skipped]) -> list[str]:
    """What the pack left out: each file, or, past SKIPPED_SHOWN, a line per reason."""
    if len(skipped) <= SKIPPED_SHOWN:
        return [f"skipped {skip.path}: {skip.reason}" for skip in skipped]
    by_reason: dict[str, list[str]] = {}
    for skip in skipped:
        by_reason.setdefault(skip.reason, []).append(skip.path)
    lines = []
    for reason, paths in by_reason.items():
        if len(paths) == 1:
            lines.append(f"skipped {paths[0]}: {reason}")
            continue
        named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        lines.append(f"skipped {len(paths)} files ({reason}): {named}")
    return lines


def packed_folder(path: Path, out=sys.stdout) -> bundle.Packed:
    """Pack the folder `path`, saying so on stderr and what the pack left out on `out`."""
    say(f"packing {path}")
    packed = bundle.pack(path)
    for line in _skipped_lines(packed.skipped):
        print(line, file=out, flush=True)
    return packed


async def deploy_folder(
    path: Path, project: str, settings: Settings, out=sys.stdout, **fields
) -> ev.Event:
    """Pack the folder `path` (packed_folder), upload it and deploy it as `project`, saying
    each step on stderr; the deploy's final event. `fields` are the
    deploy command's own (client.deploy)."""
    packed = packed_folder(path, out)
    bus = await open_bus(settings)
    try:
        _, final = await client.deploy(
            bus, path, project, packed=packed, say=say, source=marks(path), **fields
        )
    finally:
        await bus.close()
    return final


async def cmd_deploy(args, settings: Settings) -> int:
    path = Path(args.path)
    project = client.project_name(path, args.project)
    promoted: list[ev.Promoted] = []
    final = await deploy_folder(
        path,
        project,
        settings,
        replace_source=args.replace_source,
        environment=args.env or "",
        promote=not args.no_promote,
        on_promoted=promoted.append,
    )
    checked = None
    if isinstance(final, ev.Deployed) or promoted:  # an unchanged version promoted writes too
        checked = await check_overlaps(settings, project, final.version)
    word = {ev.DeployRefused: "refused", ev.DeployFailed: "failed"}.get(type(final))
    code = {"refused": EXIT_REFUSED, "failed": EXIT_FAILED}.get(word, 0)
    if args.json:
        overlaps = checked.answer["overlaps"] if checked and checked.answer else None
        promotions = [msgspec.to_builtins(event) for event in promoted]
        print(
            msgspec.json.encode(
                {**msgspec.to_builtins(final), "overlaps": overlaps, "promoted": promotions}
            ).decode()
        )
        return code
    if word is not None:
        print(f"deploy of {project} {word}: {final.reason}", file=sys.stderr)
        return code
    if isinstance(final, ev.Deployed):
        print(
            f"deployed {project} version {final.version[:19]} ({counted(len(final.files), 'file')};"
            f" {final.engine} {final.engine_version}, {final.adapter} {final.adapter_version})"
        )
    else:
        print(f"unchanged: {project} version {final.version[:19]} is deployed already")
    for event in promoted:
        print(promotion_line(event))
    for line in checked.lines if checked else ():
        print(line)
    if not promoted and args.no_promote:
        print(f"promoted nowhere: jetdbt promote {project} {final.version[7:19]} --env NAME")
    elif not promoted:
        print(f"unchanged: {args.env or 'the default environment'} runs it already")
    return 0


async def cmd_promote(args, settings: Settings) -> int:
    project = subjects.check_project(args.project)
    cmd = PromoteCommand(version=args.version, environment=args.env or "")
    bus = await open_bus(settings)
    try:
        final = await client.promote(bus, project, cmd)
    finally:
        await bus.close()
    if args.json:
        print(msgspec.json.encode(final).decode())
    elif isinstance(final, ev.Promoted):
        print(promotion_line(final))
        for line in (await check_overlaps(settings, project, final.version)).lines:
            print(line)
    elif isinstance(final, ev.DeployUnchanged):
        print(f"unchanged: {args.env or 'the default environment'} runs {final.version[:19]}")
    else:
        print(f"promote of {project} refused: {final.reason}", file=sys.stderr)
    return EXIT_REFUSED if isinstance(final, ev.DeployRefused) else 0


def promotion_line(event: ev.Promoted) -> str:
    """`prod: sha256:0a9b8c7d6e5f → sha256:6f1ed002ab55 (by ana)`."""
    before = short_digest(event.previous) if event.previous else "(nothing)"
    return f"{event.slot()}: {before} → {short_digest(event.version)} (by {event.requested_by})"


def _vars(text: str | None) -> dict:
    if not text:
        return {}
    value = yaml.safe_load(text)
    if not isinstance(value, dict):
        raise CliError(f"--vars must be a YAML or JSON mapping, got {text!r}")
    return value


def _run_args(pairs: list[str]) -> dict:
    """--arg NAME=VALUE pairs; a VALUE is read as YAML so numbers and lists keep their type."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--arg takes NAME=VALUE, got {pair!r}")
        out[name] = yaml.safe_load(value) if value else ""
    return out


async def _planned(bus: Bus, project: str, cmd: BuildCommand) -> int | None:
    """The node count of an unselected build, from the deployed manifest."""
    if cmd.select or cmd.exclude:
        return None
    deployed = await slot_versions.held_by(bus, project, DEFAULT_ENVIRONMENT)
    if not isinstance(deployed, ev.Deployed):
        return None
    with contextlib.suppress(Exception):
        return len(planned.nodes(await bus.get_blob(deployed.manifest_digest)))
    return None


def dbt_command_of(args):
    """The dbt command the options of `run`, `job save` and `schedule add` spell."""
    fields = {
        "select": args.select or [],
        "exclude": args.exclude or [],
        "vars": _vars(args.vars),
        "full_refresh": args.full_refresh,
        "defer": args.defer,
        "macro": args.macro,
        "macro_args": _vars(args.macro_args) if args.macro_args else None,
        "limit": args.limit,
        "test_behavior": args.test_behavior,
        "schema": args.schema,
    }
    try:
        return dbt_command(args.command or "build", **{k: v for k, v in fields.items() if v})
    except ValueError as exc:
        raise CliError(str(exc)) from None


def run_args_of(args) -> dict:
    return _run_args(args.arg or [])


async def cmd_run(args, settings: Settings) -> int:
    project = subjects.check_project(args.project)
    command = RunCommand(
        command=dbt_command_of(args),
        args=run_args_of(args),
        run_id=args.run_id,
        environment=args.env or "",
    )
    return await follow(args, settings, project, command)


async def cmd_parse(args, settings: Settings) -> int:
    """Parse a project directory as it is (not deployed), store its graph under the run, and
    sum the graph up: its nodes by type, its roots and leaves, dbt's warnings."""
    path = Path(args.path)
    project = client.project_name(path, args.project)
    packed = bundle.pack(path)
    bus = await open_bus(settings)
    try:
        digest = await bus.put_blob(packed.data)
        command = RunCommand(command=ParseCommand(bundle_digest=digest, vars=_vars(args.vars)))
        final = await waited(client.run(bus, project, command), args.timeout, "the parse")
        log = await _log_lines(bus, final.run_id)
    finally:
        await bus.close()
    if isinstance(final, ev.RunRefused):
        print(f"parse {final.run_id} refused: {final.reason}", file=sys.stderr)
        return EXIT_REFUSED
    if final.result.status != run_status.PASSED:
        print(f"parse failed:\n{final.result.error}", file=sys.stderr)
        return EXIT_FAILED
    nodes, edges = await asyncio.to_thread(_parsed_graph, settings, final.run_id)
    _, api_url = endpoints(settings)
    print(f"parsed {project} as it is on disk (not deployed), run {final.run_id}:")
    print("\n".join(graph_lines(nodes, edges)))
    print("  dbt's warnings:")
    print("\n".join(warning_lines(log)))
    print(f"graph: {api_url}/v1/runs/{final.run_id}/graph")
    return 0


async def _log_lines(bus: Bus, run_id: str) -> list[str]:
    """The lines of a run's log there are now; none when it kept none."""
    found = await run_logs.find(bus, run_id)
    if found is None:
        return []
    with contextlib.suppress(run_logs.LogGone):
        return [line.text async for line in found.lines()]
    return []


def _parsed_graph(settings: Settings, run_id: str) -> tuple[list[dict], list[dict]]:
    """Every node and edge of the graph a parse run stored, page after page, once the
    projection has folded it (GRAPH_WAIT seconds at most)."""
    nodes: list[dict] = []
    edges: list[dict] = []
    query = ""
    deadline = time.monotonic() + GRAPH_WAIT
    while True:
        try:
            page = api_json(settings, f"/v1/runs/{run_id}/graph{query}")
        except ApiAnswered as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        nodes += page["nodes"]
        edges += page["edges"]
        if not page.get("next"):
            return nodes, edges
        query = "?" + urlencode({"after": page["next"]["after"]})


async def cmd_retry(args, settings: Settings) -> int:
    """Resume a run with dbt retry; the project is looked up from the run when not given."""
    project = args.project
    if not project:
        path = f"/v1/runs/{subjects.check_run_id(args.run_id)}"
        try:
            project = (await asyncio.to_thread(api_json, settings, path))["project"]
        except ApiAnswered as exc:
            if exc.status != 404:
                raise
            raise CliError(f"run {args.run_id!r} is not known to the API; pass --project") from None
    retry = RetryCommand(dbt_retry_job=args.run_id, old_version=args.old_version)
    command = RunCommand(command=retry)

    def resumes(event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            print(
                f"retry of run {args.run_id} resumes version {short_digest(event.version)},"
                " the version that run built",
                file=sys.stderr,
                flush=True,
            )

    return await follow(args, settings, subjects.check_project(project), command, resumes)


async def waited(waiting, seconds: float, what: str):
    """The run's final event, or a clear word that the CLI stopped waiting (not the run)."""
    try:
        return await asyncio.wait_for(waiting, seconds)
    except TimeoutError:
        raise CliError(
            f"gave up waiting after {seconds:g}s for {what} to end; it may still be going:"
            " jetdbt status RUN_ID, or wait longer with --timeout"
        ) from None


def _follower(args, tally: Tally, out):
    """What shows the run's events: nothing, plain lines, or the live display."""
    if not args.watch:
        return None
    if not styled(out):
        return Progress(tally, out)
    from jetdbt.services.cli.display import LiveProgress, console_for

    return LiveProgress(tally, console_for(out), args.log_level)


def _detached(run_id: str, tally: Tally) -> None:
    """Ctrl-C stops the following, never the run: say so, and how to reach it again."""
    if tally.ended:
        goes_on = "it had already ended"
    elif tally.heard:
        goes_on = "the run goes on"
    else:
        goes_on = "the run goes on if its command reached the bus (status tells)"
    print(
        f"\njetdbt: stopped following run {run_id}; {goes_on}.\n"
        f"  follow it: jetdbt logs {run_id} --follow\n"
        f"  cancel it: jetdbt cancel {run_id}",
        file=sys.stderr,
        flush=True,
    )


async def follow(args, settings: Settings, project: str, command: RunCommand, heard=None) -> int:
    """Publish, follow to the end, print; the same output contract for run and retry.
    `heard`, when given, is told every event of the run as it comes."""
    if not command.run_id:  # chosen here, so a message about the run can name it
        command = msgspec.structs.replace(command, run_id=uuid.uuid4().hex)
    _, api_url = endpoints(settings)
    bus = await open_bus(settings)
    tally = Tally()
    follower = None

    async def on_event(event: ev.Event) -> None:
        if heard is not None:
            heard(event)
        if follower is None:
            tally.apply(event)
        else:
            await follower.on_event(event)

    try:
        if args.watch and isinstance(command.command, BuildCommand):
            tally.total = await _planned(bus, project, command.command)
        follower = _follower(args, tally, sys.stderr if args.json else sys.stdout)
        final = await waited(
            client.run(bus, project, command, on_event=on_event),
            args.timeout,
            f"run {command.run_id} of project {project!r}",
        )
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels this task
        if follower:
            follower.stop()
        _detached(command.run_id, tally)
        raise
    finally:
        if follower:
            follower.stop()
        await bus.close()
    if isinstance(final, ev.RunRefused):
        if args.json:
            print(
                msgspec.json.encode(
                    {
                        "run_id": final.run_id,
                        "project": project,
                        "status": run_status.REFUSED,
                        "reason": final.reason,
                        "nodes": [],
                    }
                ).decode()
            )
        print(f"run {final.run_id} refused: {final.reason}", file=sys.stderr)
        return EXIT_REFUSED
    result = final.result
    if args.json:
        body = {"run_id": final.run_id, "project": project, **msgspec.to_builtins(result)}
        print(msgspec.json.encode(body).decode())
    elif styled(sys.stdout):
        from jetdbt.services.cli.display import console_for, print_result

        print_result(console_for(sys.stdout), result, final.run_id, api_url)
    else:
        print(result_table(result))
        print(f"run id: {final.run_id}")
    return 0 if result.status == run_status.PASSED else EXIT_FAILED

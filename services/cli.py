"""The `jetdbt` command line: run the stack, deploy, run, and read status.

`up` runs every service in the foreground; `deploy` and `run` publish commands on
NATS like any other system would; `status` reads the query API.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import aiohttp
import msgspec
import yaml

from projections import dead_letters, lag, replay
from projections.migrate import connect_pool
from services import audit, client, export
from services.stack import Stack, read_stack_file
from services.watch import Progress, planned_nodes, result_table
from shared import bundle, subjects
from shared import events as ev
from shared import logging as jlog
from shared.bundle import BundleRefused
from shared.bus import Bus, ServerRefused, connect
from shared.commands import BuildCommand, ParseCommand, RetryCommand, RunCommand
from shared.config import Settings, load

__all__ = ["main"]

EXIT_FAILED = 1
EXIT_REFUSED = 3


class CliError(Exception):
    """An error the user can act on; printed without a traceback."""


def _endpoints(settings: Settings) -> tuple[str, str]:
    """Where the stack is: NATS_URL (and the API setting), else what `jetdbt up` wrote."""
    if settings.nats_url:
        return settings.nats_url, f"http://{settings.api_host}:{settings.api_port}"
    found = read_stack_file(settings.home)
    if not found:
        raise CliError(
            f"no jetdbt stack is running for {settings.home}: start one with `jetdbt up`"
            " in another terminal, or set NATS_URL"
        )
    return found["nats_url"], found["api_url"]


async def _bus(settings: Settings) -> Bus:
    nats_url, _ = _endpoints(settings)
    return await connect(nats_url, "jetdbt-cli", ensure=False)


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def cmd_up(args, settings: Settings) -> int:
    stack = await Stack(settings).start()
    stack.write_stack_file()
    print(f"jetdbt is up: API {stack.api_url}  NATS {stack.nats_url}")
    print("deploy with `jetdbt deploy PATH`, build with `jetdbt run PROJECT --watch`; Ctrl-C stops")
    try:
        await _wait_for_signal()
    finally:
        await stack.stop()
    return 0


async def cmd_serve(args, settings: Settings) -> int:
    """One service per process, against configured servers (production)."""
    roles = {args.role} if args.role != "all" else {"runner", "projectors", "api"}
    if not settings.nats_url or (roles - {"runner"} and not settings.database_url):
        raise CliError(
            "`jetdbt serve` needs NATS_URL (and DATABASE_URL for projectors and the"
            " api; runners never touch Postgres); use `jetdbt up` locally"
        )
    stack = Stack(
        settings, runner="runner" in roles, projectors="projectors" in roles, api="api" in roles
    )
    await stack.start()
    try:
        await _wait_for_signal()
    finally:
        await stack.stop()
    return 0


async def cmd_deploy(args, settings: Settings) -> int:
    path = Path(args.path)
    project = client.project_name(path, args.project)
    bus = await _bus(settings)
    try:
        packed, final = await client.deploy(bus, path, project)
    finally:
        await bus.close()
    for skip in packed.skipped:
        print(f"skipped {skip.path}: {skip.reason}")
    if isinstance(final, ev.Deployed):
        print(
            f"deployed {project} version {final.version[:19]} ({len(final.files)} files;"
            f" {final.engine} {final.engine_version}, {final.adapter} {final.adapter_version})"
        )
        return 0
    if isinstance(final, ev.DeployUnchanged):
        print(f"unchanged: {project} is already at version {final.version[:19]}; nothing to do")
        return 0
    print(f"deploy of {project} {type(final).__name__}: {final.reason}", file=sys.stderr)
    return EXIT_FAILED


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
    deployed = await bus.last_event(subjects.deploy_event(project, "deployed"))
    if not isinstance(deployed, ev.Deployed):
        return None
    with contextlib.suppress(Exception):
        return planned_nodes(msgspec.json.decode(await bus.get_blob(deployed.manifest_digest)))
    return None


async def cmd_run(args, settings: Settings) -> int:
    project = subjects.check_project(args.project)
    build = BuildCommand(
        select=args.select or [],
        exclude=args.exclude or [],
        vars=_vars(args.vars),
        full_refresh=args.full_refresh,
        defer=True if args.defer else None,
    )
    command = RunCommand(command=build, args=_run_args(args.arg or []), run_id=args.run_id)
    return await _follow(args, settings, project, command)


async def cmd_parse(args, settings: Settings) -> int:
    """Parse a project directory as it is (not deployed) and store its graph under the run."""
    path = Path(args.path)
    project = client.project_name(path, args.project)
    packed = bundle.pack(path)
    bus = await _bus(settings)
    try:
        digest = await bus.put_blob(packed.data)
        command = RunCommand(command=ParseCommand(bundle_digest=digest, vars=_vars(args.vars)))
        final = await client.run(bus, project, command)
    finally:
        await bus.close()
    if isinstance(final, ev.RunRefused):
        print(f"parse {final.run_id} refused: {final.reason}", file=sys.stderr)
        return EXIT_REFUSED
    if final.result.status != "passed":
        print(f"parse failed:\n{final.result.error}", file=sys.stderr)
        return EXIT_FAILED
    _, api_url = _endpoints(settings)
    print(
        f"parsed {project}: graph stored under run {final.run_id}:"
        f" {api_url}/v1/runs/{final.run_id}/graph"
    )
    return 0


async def cmd_retry(args, settings: Settings) -> int:
    """Resume a run with dbt retry; the project is looked up from the run when not given."""
    project = args.project
    if not project:
        _, api_url = _endpoints(settings)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{api_url}/v1/runs/{args.run_id}") as resp,
        ):
            if resp.status != 200:
                raise CliError(f"run {args.run_id!r} is not known to the API; pass --project")
            project = (await resp.json())["project"]
    command = RunCommand(command=RetryCommand(dbt_retry_job=args.run_id))
    return await _follow(args, settings, subjects.check_project(project), command)


async def _follow(args, settings: Settings, project: str, command: RunCommand) -> int:
    """Publish, follow to the end, print; the same output contract for run and retry."""
    bus = await _bus(settings)
    try:
        progress = None
        if args.watch:
            planned = None
            if isinstance(command.command, BuildCommand):
                planned = await _planned(bus, project, command.command)
            progress = Progress(planned, out=sys.stderr if args.json else sys.stdout)
        final = await client.run(
            bus, project, command, on_event=progress.on_event if progress else None
        )
    finally:
        await bus.close()
    if progress:
        progress.done()
    if isinstance(final, ev.RunRefused):
        if args.json:
            print(
                msgspec.json.encode(
                    {
                        "run_id": final.run_id,
                        "project": project,
                        "status": "refused",
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
    else:
        print(result_table(result))
        print(f"run id: {final.run_id}")
    return 0 if result.status == "passed" else EXIT_FAILED


async def cmd_status(args, settings: Settings) -> int:
    _, api_url = _endpoints(settings)
    if args.run_id:
        path = f"/v1/runs/{args.run_id}"
    elif args.project:
        path = f"/v1/projects/{subjects.check_project(args.project)}/runs"
    else:
        return await _projections(api_url)
    async with aiohttp.ClientSession() as session, session.get(api_url + path) as resp:
        body = await resp.json()
    print(yaml.safe_dump(body, sort_keys=False, default_flow_style=False).rstrip())
    return 0 if resp.status == 200 else EXIT_FAILED


async def _projections(api_url: str) -> int:
    """Each projection's checkpoint, the stream's last sequence, lag and dead letters."""
    async with aiohttp.ClientSession() as session, session.get(f"{api_url}/v1/projections") as resp:
        body = await resp.read()
    if resp.status != 200:
        raise CliError(f"GET /v1/projections answered {resp.status}: {body.decode()[:200]}")
    print(lag.render(msgspec.json.decode(body, type=lag.Lags)))
    return 0


def _database_url(settings: Settings) -> str:
    """DATABASE_URL, else the embedded Postgres that `jetdbt up` started."""
    found = settings.database_url or (read_stack_file(settings.home) or {}).get("database_url")
    if not found:
        raise CliError(
            "this command works on Postgres directly: set DATABASE_URL (and JETDBT_SCHEMA)"
        )
    return found


async def cmd_replay(args, settings: Settings) -> int:
    bus = await _bus(settings)
    try:
        report = await replay.replay(
            bus,
            _database_url(settings),
            settings.schema,
            None if args.all else args.projection,
            swap=args.swap,
            keep=args.keep,
            show=args.show,
        )
    finally:
        await bus.close()
    print(replay.render(report))
    return 0 if report.swapped or not report.differences else EXIT_FAILED


async def cmd_audit(args, settings: Settings) -> int:
    bus = await _bus(settings)
    try:
        if args.audit_cmd == "run":
            history = await audit.run_history(bus, args.run_id, args.project)
            print(msgspec.json.encode(history).decode() if args.json else audit.render(history))
            return 0
        done = await export.export(
            bus,
            Path(args.out),
            since=export.parse_time(args.since) if args.since else None,
            until=export.parse_time(args.until) if args.until else None,
            project=args.project,
        )
    finally:
        await bus.close()
    print(f"wrote {done.rows} events (sequences {done.first_seq}..{done.last_seq}) to {done.path}")
    return 0


async def cmd_dead_letters(args, settings: Settings) -> int:
    if args.dead_cmd == "list":
        _, api_url = _endpoints(settings)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{api_url}/v1/dead-letters") as resp,
        ):
            body = await resp.json()
        print(yaml.safe_dump(body, sort_keys=False, default_flow_style=False).rstrip())
        return 0 if resp.status == 200 else EXIT_FAILED
    bus = await _bus(settings)
    pool = await connect_pool(_database_url(settings), settings.schema, min_size=1, max_size=2)
    try:
        outcomes = await dead_letters.retry(pool, bus, args.projection)
    finally:
        await pool.close()
        await bus.close()
    for o in outcomes:
        print(
            f"{o.projector} #{o.stream_seq}: " + ("applied" if o.applied else f"failed: {o.error}")
        )
    failing = sum(not o.applied for o in outcomes)
    print(f"{len(outcomes) - failing} applied, {failing} still failing")
    return EXIT_FAILED if failing else 0


async def cmd_demo(args, settings: Settings) -> int:
    from services.demo import demo

    return await demo(settings)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jetdbt", description=__doc__.splitlines()[0])
    p.add_argument("--log-level", default="warning", help="structured log level (stderr)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="run the stack and every service in the foreground")
    serve = sub.add_parser("serve", help="run one service against NATS_URL and DATABASE_URL")
    serve.add_argument("role", choices=["runner", "projectors", "api", "all"])
    dep = sub.add_parser("deploy", help="pack a dbt project and deploy it")
    dep.add_argument("path")
    dep.add_argument("--project", help="project name (default: dbt_project.yml's name)")
    run = sub.add_parser("run", help="build a deployed project")
    run.add_argument("project")
    run.add_argument("--select", "-s", action="extend", nargs="+", help="dbt's --select")
    run.add_argument("--exclude", action="extend", nargs="+", help="dbt's --exclude")
    run.add_argument("--vars", help="dbt vars as a YAML/JSON mapping")
    run.add_argument("--full-refresh", action="store_true")
    run.add_argument(
        "--defer",
        action="store_true",
        help="resolve unbuilt refs to the environment's published state",
    )
    run.add_argument(
        "--arg",
        action="append",
        metavar="NAME=VALUE",
        help="a value for a {{ NAME }} placeholder in the descriptor's vars",
    )
    run.add_argument("--run-id", help="choose the run id (default: a new uuid)")
    run.add_argument("--watch", action="store_true", help="show live per-model progress")
    run.add_argument("--json", action="store_true", help="print the structured result as JSON")
    ps = sub.add_parser("parse", help="parse a project directory (not deployed) into a graph")
    ps.add_argument("path")
    ps.add_argument("--project", help="project name (default: dbt_project.yml's name)")
    ps.add_argument("--vars", help="dbt vars as a YAML/JSON mapping")
    rt = sub.add_parser("retry", help="resume a run with dbt retry, rebuilding what failed")
    rt.add_argument("run_id")
    rt.add_argument("--project", help="the run's project (default: looked up from the API)")
    rt.add_argument("--watch", action="store_true", help="show live per-model progress")
    rt.add_argument("--json", action="store_true", help="print the structured result as JSON")
    st = sub.add_parser("status", help="health, a run, or a project's runs")
    st.add_argument("run_id", nargs="?")
    st.add_argument("--project")
    sub.add_parser("demo", help="start, deploy the example, build it, show the API, stop")
    rep = sub.add_parser("replay", help="rebuild projections from the log into a shadow, compare")
    which = rep.add_mutually_exclusive_group()
    which.add_argument("--projection", action="append", help="one projection (repeatable)")
    which.add_argument("--all", action="store_true", help="every projection (the default)")
    rep.add_argument("--swap", action="store_true", help="then make the shadow the live schema")
    rep.add_argument("--keep", action="store_true", help="keep the shadow schema to inspect it")
    rep.add_argument("--show", type=int, default=20, help="differences shown per table")
    aud = sub.add_parser("audit", help="a run's history from the log, or the log as Parquet")
    aud_sub = aud.add_subparsers(dest="audit_cmd", required=True)
    aud_run = aud_sub.add_parser("run", help="a run's whole history, commands included")
    aud_run.add_argument("run_id")
    aud_run.add_argument("--project", help="the run's project (when its id is not unique)")
    aud_run.add_argument("--json", action="store_true", help="for machines")
    aud_exp = aud_sub.add_parser("export", help="one Parquet row per event")
    aud_exp.add_argument("--since", help="ISO 8601 time, inclusive")
    aud_exp.add_argument("--until", help="ISO 8601 time, exclusive")
    aud_exp.add_argument("--project")
    aud_exp.add_argument("--out", required=True, help="the .parquet file to write")
    dead = sub.add_parser("dead-letters", help="events a projection could not apply")
    dead_sub = dead.add_subparsers(dest="dead_cmd", required=True)
    dead_sub.add_parser("list", help="list them (from the API)")
    dead_retry = dead_sub.add_parser("retry", help="apply them again, after a fix")
    dead_retry.add_argument("--projection", help="only this projection's")
    return p


COMMANDS = {
    "up": cmd_up,
    "serve": cmd_serve,
    "deploy": cmd_deploy,
    "run": cmd_run,
    "retry": cmd_retry,
    "parse": cmd_parse,
    "status": cmd_status,
    "demo": cmd_demo,
    "replay": cmd_replay,
    "audit": cmd_audit,
    "dead-letters": cmd_dead_letters,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    jlog.configure(args.log_level)
    try:
        return asyncio.run(COMMANDS[args.cmd](args, load()))
    except (CliError, ServerRefused, BundleRefused, subjects.InvalidName, ValueError) as exc:
        print(f"jetdbt: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

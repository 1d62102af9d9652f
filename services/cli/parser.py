"""The command line's grammar: every command, its arguments and its help."""

from __future__ import annotations

import argparse

from jetdbt.shared.jobs import webhooks

# How long the CLI waits for a run by default: a run's own limit plus time to queue.
WAIT_SECONDS = 7200.0

__all__ = ["build_parser"]

DESCRIPTION = "The `jetdbt` command line: run the stack, deploy, run, and read status."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jetdbt", description=DESCRIPTION)
    p.add_argument("--log-level", default="warning", help="structured log level (stderr)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser(
        "up",
        help="run the stack and every service in the foreground",
        description="Run the stack in the foreground: nats-server, Postgres, a runner, the\n"
        "projectors, the API with the run viewer, and MCP; Ctrl-C stops all of it.\n"
        "It takes no arguments: the settings below (environment variables) change it.",
        epilog=_settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve = sub.add_parser("serve", help="run one service against NATS_URL and DATABASE_URL")
    serve.add_argument(
        "role", choices=["runner", "projectors", "api", "triggers", "notifier", "all"]
    )
    dep = sub.add_parser("deploy", help="pack a dbt project and deploy it")
    dep.add_argument("path")
    dep.add_argument("--project", help="project name (default: dbt_project.yml's name)")
    dep.add_argument(
        "--replace-source",
        action="store_true",
        help="deploy from another folder than the project's current version came from",
    )
    promoted = dep.add_mutually_exclusive_group()
    promoted.add_argument(
        "--env", help="the environment to promote the version into (default: the default one)"
    )
    promoted.add_argument(
        "--no-promote",
        action="store_true",
        help="upload and parse the version only; `jetdbt promote` makes it run somewhere",
    )
    pro = sub.add_parser(
        "promote", help="make an environment run a deployed version (also the rollback)"
    )
    pro.add_argument("project").completer = _projects
    pro.add_argument("version", help="a deployed version: its digest, or 12+ of its hex digits")
    pro.add_argument("--env", help="the environment (default: the project's default one)")
    pro.add_argument("--json", action="store_true", help="print the outcome's event as JSON")
    envs = sub.add_parser(
        "environments", help="what each environment of a project runs, and since when"
    )
    envs.add_argument("project").completer = _projects
    envs.add_argument("--env", help="one environment only")
    envs.add_argument("--history", action="store_true", help="every promotion, newest first")
    envs.add_argument("--json", action="store_true", help="the API's answer as JSON")
    dep.add_argument(
        "--json", action="store_true", help="print the deployed event, with its overlaps, as JSON"
    )
    run = sub.add_parser("run", help="build a deployed project (or run another dbt command)")
    run.add_argument("project").completer = _projects
    _dbt_options(run)
    run.add_argument("--run-id", help="choose the run id (default: a new uuid)")
    run.add_argument("--watch", action="store_true", help="show live per-model progress")
    run.add_argument("--json", action="store_true", help="print the structured result as JSON")
    _wait_limit(run)
    _ci_command(sub)
    ps = sub.add_parser("parse", help="parse a project directory (not deployed) into a graph")
    ps.add_argument("path")
    ps.add_argument("--project", help="project name (default: dbt_project.yml's name)")
    ps.add_argument("--vars", help="dbt vars as a YAML/JSON mapping")
    _wait_limit(ps)
    rt = sub.add_parser("retry", help="resume a run with dbt retry, rebuilding what failed")
    rt.add_argument("run_id")
    rt.add_argument(
        "--project", help="the run's project (default: looked up from the API)"
    ).completer = _projects
    rt.add_argument(
        "--old-version",
        action="store_true",
        help="resume the version the run built even though a newer one is deployed",
    )
    rt.add_argument("--watch", action="store_true", help="show live per-model progress")
    rt.add_argument("--json", action="store_true", help="print the structured result as JSON")
    _wait_limit(rt)
    cn = sub.add_parser("cancel", help="cancel a run: a queued one never starts, dbt is killed")
    cn.add_argument("run_id")
    cn.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="stop waiting for the run to end after this long (default 120)",
    )
    lg = sub.add_parser("logs", help="a run's log lines (kept after it ends)")
    lg.add_argument("run_id")
    lg.add_argument(
        "--follow", "-f", action="store_true", help="print lines as they come, until the run ends"
    )
    lg.add_argument("--after", type=int, default=0, metavar="LINE", help="start after this line")
    prj = sub.add_parser(
        "projects", help="the projects you may see: version, last deploy (why it failed), last run"
    )
    prj.add_argument("--offset", type=int, default=0, help="skip this many projects")
    _answer_shape(prj)
    st = sub.add_parser("status", help="a run, a project's runs (tables), or the projections' lag")
    st.add_argument("run_id", nargs="?")
    st.add_argument("--project").completer = _projects
    st.add_argument("--offset", type=int, default=0, help="skip this many newer runs")
    st.add_argument("--env", metavar="NAME", help="only the runs of this project environment")
    _answer_shape(st)
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
    tok = sub.add_parser("token", help="API tokens: create (shown once), list, revoke")
    tok_sub = tok.add_subparsers(dest="token_cmd", required=True)
    tok_new = tok_sub.add_parser("create", help="a token for a principal, team and role")
    tok_new.add_argument("--principal", required=True, help="who the token speaks for")
    tok_new.add_argument("--team", required=True, help="the principal's team")
    tok_new.add_argument("--role", required=True, choices=("viewer", "runner", "deployer", "admin"))
    tok_new.add_argument("--project", default="*", help="a glob of project names (default: all)")
    tok_new.add_argument("--expires", help="a lifetime: 90m, 12h, 30d, 2w (default: none)")
    tok_sub.add_parser("list", help="every token, never its secret")
    tok_rev = tok_sub.add_parser("revoke", help="delete a token: refused from its next request")
    tok_rev.add_argument("token_id")
    acc = sub.add_parser("access", help="NATS users of other systems (embedded stack)")
    acc_sub = acc.add_subparsers(dest="access_cmd", required=True)
    acc_sys = acc_sub.add_parser("add-system", help="a NATS user publishing its own commands")
    acc_sys.add_argument("name", help="the system's NATS user and principal")
    acc_sys.add_argument("--team", required=True)
    acc_sys.add_argument(
        "--project", action="append", required=True, help="a project it may run ('*': all)"
    )
    acc_sys.add_argument(
        "--role",
        choices=("runner", "deployer"),
        default="runner",
        help="the verbs it may publish: runner (run, cancel) or deployer (and deploy)",
    )
    mcp = sub.add_parser("mcp", help="serve MCP over stdio for a local agent (see docs/guide.md)")
    mcp.add_argument("--token-file", help="a file holding the API token (default: JETDBT_TOKEN)")
    mcp.add_argument("--api", metavar="URL", help="the API's address (default: the stack's)")
    con = sub.add_parser("contract", help="apply streams.yaml as the operator")
    apply = con.add_subparsers(dest="contract_cmd", required=True).add_parser("apply")
    apply.add_argument(
        "--replicas",
        type=_replicas,
        help="every stream and bucket at this many replicas or more, never fewer than a"
        " stream has (default: JETDBT_STREAM_REPLICAS)",
    )
    dead = sub.add_parser("dead-letters", help="events a projection could not apply")
    dead_sub = dead.add_subparsers(dest="dead_cmd", required=True)
    dead_sub.add_parser("list", help="list them (from the API)")
    dead_retry = dead_sub.add_parser("retry", help="apply them again, after a fix")
    dead_retry.add_argument("--projection", help="only this projection's")
    _job_commands(sub)
    _hook_commands(sub)
    return p


def _settings_help() -> str:
    from jetdbt.shared.process.config import STACK_SETTINGS

    width = max(len(name) for name, _, _ in STACK_SETTINGS)
    lines = [
        f"  {name:<{width}}  {what} (default: {default})" for name, default, what in STACK_SETTINGS
    ]
    return "settings:\n" + "\n".join(lines)


def _hook_commands(sub) -> None:
    """`jetdbt hook ...`: signed webhooks of a project's (or a job's) runs."""
    hook = sub.add_parser("hook", help="webhooks of runs: add, list, remove, deliveries")
    hook_sub = hook.add_subparsers(dest="hook_cmd", required=True)
    add = hook_sub.add_parser("add", help="post signed JSON to a URL on a run's start or end")
    add.add_argument("name")
    add.add_argument("--project", required=True).completer = _projects
    add.add_argument("--url", required=True, help="http or https, on JETDBT_WEBHOOK_HOSTS")
    add.add_argument(
        "--on",
        action="append",
        required=True,
        choices=webhooks.EVENTS,
        help="start, success, failure or end (any end); repeat for more",
    )
    add.add_argument("--job", help="only this saved job's runs (default: every run)")
    add.add_argument(
        "--secret-stdin",
        action="store_true",
        help="read the secret from stdin (default: one is generated and printed once)",
    )
    for action, what in (
        ("list", "a project's webhooks"),
        ("remove", "remove a webhook"),
        ("deliveries", "a webhook's delivery attempts, newest first"),
    ):
        one = hook_sub.add_parser(action, help=what)
        if action != "list":
            one.add_argument("name")
        one.add_argument("--project", required=True).completer = _projects
        if action == "deliveries":
            one.add_argument("--dead", action="store_true", help="only the dead letters")


def _ci_command(sub) -> None:
    """`jetdbt ci PATH --pr N` and `jetdbt ci close --pr N --project NAME`."""
    ci = sub.add_parser(
        "ci",
        help="check a pull request: deploy it unpromoted, build what it changes in its own schema",
        description="Check a pull request as a CI job does on each push: deploy PATH as the\n"
        "PR's version (promoted into no environment), build state:modified+ (or -s) into\n"
        "the PR's own schema, deferring to the environment's published state; exit 0 when\n"
        "it passed, 1 when it failed, 3 when refused. `jetdbt ci close --pr N --project NAME`\n"
        "drops the PR's schema with everything in it (a folder named close: ./close).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ci.add_argument("path", help="the PR's project folder, or `close`")
    ci.add_argument("--pr", required=True, type=_pr_number, help="the pull request's number")
    ci.add_argument(
        "--project", help="project name (default: dbt_project.yml's name; close needs it)"
    ).completer = _projects
    ci.add_argument(
        "--env",
        metavar="NAME",
        help="the environment it defers to (default: the project's default)",
    )
    ci.add_argument("--select", "-s", action="extend", nargs="+", help="dbt's --select")
    ci.add_argument("--exclude", action="extend", nargs="+", help="dbt's --exclude")
    ci.add_argument("--json", action="store_true", help="print the structured result as JSON")
    ci.add_argument(
        "--api",
        nargs="?",
        const="",
        metavar="URL",
        help="go through the API (URL, default the stack's) with JETDBT_TOKEN, a deployer's,"
        " instead of NATS: a CI system's way in",
    )
    _wait_limit(ci)


def _replicas(text: str) -> int:
    """--replicas: read as JETDBT_STREAM_REPLICAS is (imported only when it is given)."""
    from jetdbt.shared.process.config import DECLARED

    (setting,) = [s for s in DECLARED if s.name == "JETDBT_STREAM_REPLICAS"]
    try:
        return setting.read("--replicas", text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pr_number(text: str) -> int:
    """--pr: a pull request's number, 1 to MAX_PR (imported only when --pr is given)."""
    from jetdbt.shared.bus.commands import MAX_PR

    number = int(text) if text.isdigit() else 0
    if not 0 < number <= MAX_PR:
        raise argparse.ArgumentTypeError(f"a pull request's number is 1 to {MAX_PR}; got {text!r}")
    return number


def _dbt_options(p: argparse.ArgumentParser) -> None:
    """What a run (or a saved job) asks dbt for: the command, its selection and overrides.
    Each is None (or off) unless given, and `dbt_options` names them: a schedule saves its
    job when any is given, `--command build` too."""
    before = len(p._actions)
    p.add_argument(
        "--command",
        help="the dbt command: build (default), run, test, seed, snapshot, 'source freshness',"
        " run-operation, 'docs generate', show, compile",
    )
    p.add_argument("--select", "-s", action="extend", nargs="+", help="dbt's --select")
    p.add_argument("--exclude", action="extend", nargs="+", help="dbt's --exclude")
    p.add_argument("--vars", help="dbt vars as a YAML/JSON mapping")
    p.add_argument("--full-refresh", action="store_true")
    p.add_argument(
        "--defer",
        action=argparse.BooleanOptionalAction,
        help="resolve unbuilt refs to the environment's published state (--no-defer: build"
        " them, where the environment defers by default: a person's dev, a pull request's)",
    )
    p.add_argument(
        "--schema",
        metavar="SCHEMA",
        help="build into this scratch schema instead of the profile's (CI); publishes no state",
    )
    p.add_argument(
        "--env",
        metavar="NAME",
        help="the project environment it runs in (default: the project's default, prod;"
        " dev builds into a schema of your own, deferring to prod)",
    )
    p.add_argument("--test-behavior", choices=("build", "after_all", "none"), help="build only")
    p.add_argument("--macro", help="run-operation: the macro to run")
    p.add_argument("--macro-args", help="run-operation: the macro's args as YAML/JSON")
    p.add_argument("--limit", type=int, help="show: how many rows to preview")
    p.add_argument(
        "--arg",
        action="append",
        metavar="NAME=VALUE",
        help="a value for a {{ NAME }} placeholder in the descriptor's vars",
    )
    p.set_defaults(dbt_options=tuple(a.dest for a in p._actions[before:]))


def _job_commands(sub) -> None:
    from jetdbt.shared.bus.commands import OUTCOMES

    """`jetdbt job ...` and `jetdbt schedule ...`: saved jobs and their schedules."""
    job = sub.add_parser("job", help="saved jobs: save, list, run, delete")
    job_sub = job.add_subparsers(dest="job_cmd", required=True)
    save = job_sub.add_parser("save", help="save (or change) a job: a command with its options")
    save.add_argument("name")
    save.add_argument("--project", required=True).completer = _projects
    _dbt_options(save)
    save.add_argument(
        "--on-relation",
        action="append",
        metavar="RELATION",
        help="run the job when another system declares a write of dbt://WAREHOUSE/SCHEMA/NAME",
    )
    save.add_argument("--after", metavar="JOB", help="run the job when a run of JOB ends")
    save.add_argument(
        "--outcome",
        choices=OUTCOMES,
        default="any",
        help="with --after: the end of JOB's run that starts this job (default: any)",
    )
    lst = job_sub.add_parser("list", help="a project's jobs and their schedules")
    lst.add_argument("--project", required=True).completer = _projects
    jrun = job_sub.add_parser("run", help="run a saved job now")
    jrun.add_argument("name")
    jrun.add_argument("--project", required=True).completer = _projects
    jrun.add_argument("--watch", action="store_true", help="show live per-model progress")
    jrun.add_argument("--json", action="store_true", help="print the structured result as JSON")
    _wait_limit(jrun)
    jdel = job_sub.add_parser("delete", help="delete a job (its schedule is removed)")
    jdel.add_argument("name")
    jdel.add_argument("--project", required=True).completer = _projects
    sch = sub.add_parser("schedule", help="jobs' schedules, fired by the NATS server itself")
    sch_sub = sch.add_subparsers(dest="schedule_cmd", required=True)
    add = sch_sub.add_parser(
        "add", help="schedule a job (saving it first when a command or selection is given)"
    )
    add.add_argument("name")
    add.add_argument("--project", required=True).completer = _projects
    add.add_argument(
        "--cron", required=True, help="cron with seconds (`0 0 6 * * *`) or `@every 30s`"
    )
    add.add_argument("--tz", default="", help="an IANA time zone for the cron (default UTC)")
    _dbt_options(add)
    sls = sch_sub.add_parser("list", help="a project's schedules: state, fires, next fire")
    sls.add_argument("--project", required=True).completer = _projects
    for action, what in (
        ("pause", "stop firing, keep the schedule"),
        ("resume", "fire again"),
        ("remove", "remove the schedule, keep the job"),
    ):
        one = sch_sub.add_parser(action, help=what)
        one.add_argument("name")
        one.add_argument("--project", required=True).completer = _projects


def _answer_shape(p: argparse.ArgumentParser) -> None:
    """A reading command prints a table, or the API's answer itself for scripts."""
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="the API's answer as JSON")
    shape.add_argument("--yaml", action="store_true", help="the API's answer as YAML")


def _projects(**kwargs) -> list[str]:
    """Deployed project names for tab completion; imported only when the shell asks."""
    from jetdbt.services.cli.completion import deployed_projects

    return deployed_projects(**kwargs)


def _wait_limit(command) -> None:
    command.add_argument(
        "--timeout",
        type=float,
        default=WAIT_SECONDS,
        metavar="SECONDS",
        help=f"stop waiting for the run's end after this long (default {WAIT_SECONDS:.0f})",
    )

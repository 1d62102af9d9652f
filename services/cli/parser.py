"""The command line's grammar: every command, its arguments and its help."""

from __future__ import annotations

import argparse

# How long the CLI waits for a run by default: a run's own limit plus time to queue.
WAIT_SECONDS = 7200.0

__all__ = ["build_parser"]

DESCRIPTION = "The `jetdbt` command line: run the stack, deploy, run, and read status."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jetdbt", description=DESCRIPTION)
    p.add_argument("--log-level", default="warning", help="structured log level (stderr)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="run the stack and every service in the foreground")
    serve = sub.add_parser("serve", help="run one service against NATS_URL and DATABASE_URL")
    serve.add_argument("role", choices=["runner", "projectors", "api", "all"])
    dep = sub.add_parser("deploy", help="pack a dbt project and deploy it")
    dep.add_argument("path")
    dep.add_argument("--project", help="project name (default: dbt_project.yml's name)")
    run = sub.add_parser("run", help="build a deployed project")
    run.add_argument("project").completer = _projects
    run.add_argument("--select", "-s", action="extend", nargs="+", help="dbt's --select")
    run.add_argument("--exclude", action="extend", nargs="+", help="dbt's --exclude")
    run.add_argument("--vars", help="dbt vars as a YAML/JSON mapping")
    run.add_argument("--full-refresh", action="store_true")
    run.add_argument(
        "--command",
        default="build",
        help="the dbt command: build, run, test, seed, snapshot, 'source freshness',"
        " run-operation, 'docs generate', show",
    )
    run.add_argument("--macro", help="run-operation: the macro to run")
    run.add_argument("--macro-args", help="run-operation: the macro's args as YAML/JSON")
    run.add_argument("--limit", type=int, help="show: how many rows to preview")
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
    _wait_limit(run)
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
    st = sub.add_parser("status", help="health, a run, or a project's runs")
    st.add_argument("run_id", nargs="?")
    st.add_argument("--project").completer = _projects
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
    mcp = sub.add_parser("mcp", help="serve MCP over stdio for a local agent (see the README)")
    mcp.add_argument("--token-file", help="a file holding the API token (default: JETDBT_TOKEN)")
    mcp.add_argument("--api", metavar="URL", help="the API's address (default: the stack's)")
    con = sub.add_parser("contract", help="apply streams.yaml as the operator")
    con.add_subparsers(dest="contract_cmd", required=True).add_parser("apply")
    dead = sub.add_parser("dead-letters", help="events a projection could not apply")
    dead_sub = dead.add_subparsers(dest="dead_cmd", required=True)
    dead_sub.add_parser("list", help="list them (from the API)")
    dead_retry = dead_sub.add_parser("retry", help="apply them again, after a fix")
    dead_retry.add_argument("--projection", help="only this projection's")
    return p


def _projects(**kwargs) -> list[str]:
    """Deployed project names for tab completion; imported only when the shell asks."""
    from services.cli.completion import deployed_projects

    return deployed_projects(**kwargs)


def _wait_limit(command) -> None:
    command.add_argument(
        "--timeout",
        type=float,
        default=WAIT_SECONDS,
        metavar="SECONDS",
        help=f"stop waiting for the run's end after this long (default {WAIT_SECONDS:.0f})",
    )

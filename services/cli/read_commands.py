"""Commands that only read the query API: `status` and the answers other commands show.

Synchronous and light on purpose: `jetdbt status` must print in well under 0.3 s, so
this module imports no event loop, no NATS client and no HTTP library beyond the
standard one (see bench/bench_cli_start.py).
"""

from __future__ import annotations

from urllib.parse import urlencode

import msgspec
from jetdbt.services.cli.common import api_json
from jetdbt.shared.bus import subjects
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_environments", "cmd_projects", "cmd_status", "show"]


def cmd_status(args, settings: Settings) -> int:
    if args.run_id:
        answer = api_json(settings, f"/v1/runs/{subjects.check_run_id(args.run_id)}")
        return _print(args, answer, "run_table")
    if args.project:
        path = f"/v1/projects/{subjects.check_project(args.project)}/runs"
        env = subjects.check_environment_name(args.env) if args.env else ""
        params = urlencode({k: v for k, v in (("environment", env), ("offset", args.offset)) if v})
        answer = api_json(settings, path + (f"?{params}" if params else ""))
        return _print(args, answer, "runs_table", env)
    if args.env:
        raise SystemExit("--env keeps one environment's runs of a project: add --project NAME")
    return _projections(settings)


def cmd_projects(args, settings: Settings) -> int:
    """Every project the token may see; a failed last deploy says why under the table."""
    answer = api_json(settings, "/v1/projects" + (f"?offset={args.offset}" if args.offset else ""))
    return _print(args, answer, "projects_table")


def cmd_environments(args, settings: Settings) -> int:
    """What each environment of a project runs, or (--history) every promotion."""
    key = "promotions" if args.history else "versions"
    path = f"/v1/projects/{subjects.check_project(args.project)}/{key}"
    if args.env:
        path += f"?environment={subjects.check_environment_name(args.env)}"
    answer = api_json(settings, path)
    if args.json:
        print(msgspec.json.encode(answer).decode())
        return 0
    from jetdbt.services.cli import tables

    print(tables.versions_table(answer, key))
    return 0


def show(settings: Settings, path: str) -> int:
    """GET `path` from the API and print its answer as YAML."""
    print(_yaml(api_json(settings, path)))
    return 0


def _yaml(answer) -> str:
    import yaml

    return yaml.safe_dump(answer, sort_keys=False, default_flow_style=False).rstrip()


def _print(args, answer: dict, table: str, *shown) -> int:
    """The answer as a table (`shown`: what the table says it was kept to); as the API's
    JSON with --json, as YAML with --yaml."""
    if args.json:
        print(msgspec.json.encode(answer).decode())
    elif args.yaml:
        print(_yaml(answer))
    else:
        from jetdbt.services.cli import tables

        print(getattr(tables, table)(answer, *shown))
    return 0


def _projections(settings: Settings) -> int:
    """Each projection's checkpoint, the stream's last sequence, lag and dead letters."""
    from jetdbt.projections import lag

    answer = api_json(settings, "/v1/projections")
    print(lag.render(msgspec.convert(answer, type=lag.Lags)))
    return 0

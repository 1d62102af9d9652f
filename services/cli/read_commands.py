"""Commands that only read the query API: `status` and the answers other commands show.

Synchronous and light on purpose: `jetdbt status` must print in well under 0.3 s, so
this module imports no event loop, no NATS client and no HTTP library beyond the
standard one (see bench/bench_cli_start.py).
"""

from __future__ import annotations

import msgspec

from services.cli.common import EXIT_FAILED, CliError, api_get
from shared import subjects
from shared.config import Settings

__all__ = ["cmd_status", "show"]


def cmd_status(args, settings: Settings) -> int:
    if args.run_id:
        return show(settings, f"/v1/runs/{subjects.check_run_id(args.run_id)}")
    if args.project:
        return show(settings, f"/v1/projects/{subjects.check_project(args.project)}/runs")
    return _projections(settings)


def show(settings: Settings, path: str) -> int:
    """GET `path` from the API and print its JSON answer as YAML; fails unless it is a 200."""
    status, body = api_get(settings, path)
    try:
        answer = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise CliError(
            f"GET {path} answered {status}: {body.decode(errors='replace')[:200]}"
        ) from None
    import yaml

    print(yaml.safe_dump(answer, sort_keys=False, default_flow_style=False).rstrip())
    return 0 if status == 200 else EXIT_FAILED


def _projections(settings: Settings) -> int:
    """Each projection's checkpoint, the stream's last sequence, lag and dead letters."""
    from projections import lag

    status, body = api_get(settings, "/v1/projections")
    if status != 200:
        raise CliError(f"GET /v1/projections answered {status}: {body.decode()[:200]}")
    print(lag.render(msgspec.json.decode(body, type=lag.Lags)))
    return 0

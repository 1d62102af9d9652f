"""`jetdbt hook ...`: a project's (or a job's) webhooks and their deliveries.

Adding and removing are requests to the notifier over NATS (the operator's user may ask;
through the API, a token with the runner role of the project's team); an add prints the
secret once. Lists are read from the query API, which never holds a secret.
"""

from __future__ import annotations

import asyncio
import sys

import msgspec
from jetdbt.services.cli.common import EXIT_REFUSED, CliError, api_call, open_bus
from jetdbt.shared.bus import subjects
from jetdbt.shared.jobs.hook_control import NotifierAway, ask_notifier
from jetdbt.shared.jobs.webhooks import HookRequest
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_hook"]


async def _ask(settings: Settings, project: str, request: HookRequest) -> int:
    bus = await open_bus(settings)
    try:
        reply = await ask_notifier(bus, project, request)
    except NotifierAway as exc:
        raise CliError(str(exc)) from None
    finally:
        await bus.close()
    if reply.error:
        print(f"hook {request.name} {request.action} refused: {reply.error}", file=sys.stderr)
        return EXIT_REFUSED
    if request.action == "remove":
        print(f"hook {reply.name}: removed")
        return 0
    scope = f" of job {reply.job}" if reply.job else ""
    print(f"hook {reply.name}{scope}: posts {','.join(reply.on)} to {reply.url}")
    print(f"secret (shown once; verify X-Jetdbt-Signature with it): {reply.secret}")
    return 0


def _read(settings: Settings, path: str) -> dict:
    status, body = api_call(settings, path)
    if status != 200:
        raise CliError(f"GET {path} answered {status}: {body.decode(errors='replace')[:300]}")
    return msgspec.json.decode(body)


async def cmd_hook(args, settings: Settings) -> int:
    project = subjects.check_project(args.project)
    if args.hook_cmd == "add":
        secret = sys.stdin.readline().strip() if args.secret_stdin else ""
        request = HookRequest(
            action="add", name=args.name, url=args.url, on=args.on, job=args.job or "",
            secret=secret,
        )  # fmt: skip
        return await _ask(settings, project, request)
    if args.hook_cmd == "remove":
        return await _ask(settings, project, HookRequest(action="remove", name=args.name))
    if args.hook_cmd == "list":
        found = await asyncio.to_thread(_read, settings, f"/v1/projects/{project}/hooks?limit=500")
        print(f"{'hook':24} {'on':28} {'job':16} url")
        for h in found["hooks"]:
            print(f"{h['name']:24} {','.join(h['on']):28} {h['job'] or '-':16} {h['url']}")
        return 0
    name = subjects.check_hook_name(args.name)
    path = f"/v1/projects/{project}/hooks/{name}/deliveries?limit=500"
    found = await asyncio.to_thread(_read, settings, path + ("&state=dead" if args.dead else ""))
    print(f"{'delivery':34} {'run':34} {'event':8} {'try':>3} {'status':>6}  state")
    for d in found["deliveries"]:
        print(
            f"{d['delivery_id']:34} {d['run_id']:34} {d['event']:8} {d['attempt']:>3}"
            f" {d['status']:>6}  {d['state']} {d['error']}".rstrip()
        )
    return 0

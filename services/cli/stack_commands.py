"""Commands that run services: the whole stack locally (`up`), one role (`serve`), the demo."""

from __future__ import annotations

from services.cli.common import CliError, wait_for_signal
from services.stack import Stack, StackFailed
from shared.config import Settings

__all__ = ["cmd_up", "cmd_serve", "cmd_demo"]


async def _started(stack: Stack) -> Stack:
    try:
        return await stack.start()
    except StackFailed as exc:
        raise CliError(str(exc)) from None


async def cmd_up(args, settings: Settings) -> int:
    stack = await _started(Stack(settings))
    stack.write_stack_file()
    print(f"jetdbt is up: API {stack.api_url}  NATS {stack.nats_url}")
    print("deploy with `jetdbt deploy PATH`, build with `jetdbt run PROJECT --watch`; Ctrl-C stops")
    return await _until_signal(stack)


async def cmd_serve(args, settings: Settings) -> int:
    """One service per process, against configured servers (production)."""
    roles = {args.role} if args.role != "all" else {"runner", "projectors", "api"}
    if not settings.nats_url or (roles - {"runner"} and not settings.database_url):
        raise CliError(
            "`jetdbt serve` needs NATS_URL (and DATABASE_URL for projectors and the"
            " api; runners never touch Postgres); use `jetdbt up` locally"
        )
    stack = await _started(
        Stack(
            settings,
            runner="runner" in roles,
            projectors="projectors" in roles,
            api="api" in roles,
        )
    )
    return await _until_signal(stack)


async def _until_signal(stack: Stack) -> int:
    """Keep a started stack serving until SIGINT or SIGTERM, then stop it."""
    try:
        await wait_for_signal()
    finally:
        await stack.stop()
    return 0


async def cmd_demo(args, settings: Settings) -> int:
    from services.demo import demo

    return await demo(settings)

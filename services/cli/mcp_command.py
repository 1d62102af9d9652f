"""`jetdbt mcp`: the MCP server over stdio, speaking for one API token."""

from __future__ import annotations

from pathlib import Path

from jetdbt.services.cli.common import CliError, endpoints
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_mcp"]


def _stack_api(settings: Settings) -> str:
    try:
        return endpoints(settings)[1]
    except CliError as exc:
        raise CliError(f"{exc}; or name the API with --api URL") from None


async def cmd_mcp(args, settings: Settings) -> int:
    from jetdbt.services.access.local import cli_token
    from jetdbt.services.mcp import stdio

    try:
        token = stdio.read_token_file(Path(args.token_file)) if args.token_file else None
        token = token or cli_token(settings)
        if not token:
            raise CliError(
                "no API token: pass --token-file, set JETDBT_TOKEN, or start `jetdbt up` here"
                " (it keeps an admin token)"
            )
        api_url = args.api or _stack_api(settings)
        await stdio.serve_stdio(api_url, token)
    except stdio.StdioRefused as exc:
        raise CliError(str(exc)) from None
    return 0

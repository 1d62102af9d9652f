"""Tab completion (argcomplete): commands and options come from the parser; deployed project
names from the API's project list, read only when the shell asks (see docs/guide.md)."""

from __future__ import annotations

import msgspec
from jetdbt.services.cli.common import api_call
from jetdbt.shared.process.config import load

__all__ = ["deployed_projects"]

# A completion that waits longer than this is worse than none.
TIMEOUT_SECONDS = 2.0


def deployed_projects(prefix: str = "", **_) -> list[str]:
    """Names of the deployed projects the CLI's token may see that start with `prefix`."""
    try:
        status, body = api_call(load(), "/v1/projects?limit=500", timeout=TIMEOUT_SECONDS)
        projects = msgspec.json.decode(body)["projects"] if status == 200 else []
    except Exception:  # no stack, no token, an old API: no names, and nothing in the shell
        return []
    return [p["project"] for p in projects if p.get("version") and p["project"].startswith(prefix)]

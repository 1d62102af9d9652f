"""The admin token a stack bootstraps, so `jetdbt up` is secure and still two commands."""

from __future__ import annotations

from pathlib import Path

from jetdbt.services.access.local import ADMIN, admin_token_file, write_private
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.identity import principals

__all__ = ["admin_token"]


async def admin_token(bus: Bus, home: Path) -> str:
    """The admin token in JETDBT_HOME/access (0600) when it still authenticates on this
    server, else a new one written there. `bus` must be allowed to write DBT_IDENTITY."""
    path = admin_token_file(home)
    try:
        kept = path.read_text().strip()
        await principals.authenticate(bus, kept)
        return kept
    except (OSError, principals.BadToken):
        pass
    _, bearer = await principals.create_token(
        bus, principal=ADMIN, team=principals.DEFAULT_TEAM, role="admin"
    )
    write_private(path, bearer + "\n")
    return bearer

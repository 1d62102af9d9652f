"""One stack for several tests of a module, set up as tests/conftest.py's `stack` is (a
nats-server of its own, the session's Postgres in a fresh schema): tests that need a stack
but not an empty one skip a stack's start and dbt's first start in each."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from jetdbt.services.stack.composition import Stack
from jetdbt.services.stack.embedded import NatsServer
from jetdbt.shared.process.config import load

from tests.support.helpers import use_token


@contextlib.asynccontextmanager
async def shared_stack(
    folder: Path, pg_url: str, environments: Path, extra: dict[str, str] | None = None
):
    """A started stack whose files are under `folder`; runs may read `folder`, as their
    sandbox uid (a gate's release file lies there). `extra`: more settings (a warehouses
    file)."""
    folder.chmod(0o755)
    nats = NatsServer(folder / "nats").start()
    try:
        settings = load(
            {
                "JETDBT_SANDBOX_READ": str(folder),
                "JETDBT_HOME": str(folder / "home"),
                "NATS_URL": nats.url,
                "DATABASE_URL": pg_url,
                "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
                "JETDBT_API_PORT": "0",
                "JETDBT_ENVIRONMENTS_DIR": str(environments),
                **(extra or {}),
            }
        )
        stack = await Stack(settings).start()
        use_token(stack.api_url, stack.admin_token)
        try:
            yield stack
        finally:
            await stack.stop()
    finally:
        nats.stop()

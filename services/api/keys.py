"""What a handler reads from `request.app`: one typed key for each thing the app holds.

The pool and the NATS connection are opened when the app starts and closed when it stops
(app.py's cleanup context), so handlers are module-level functions that take only the request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import asyncpg
from aiohttp import web
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process.config import Settings

__all__ = ["POOL", "BUS", "SETTINGS", "DEAD_TASKS", "SANDBOX", "UI_DIST"]

POOL = web.AppKey("pool", asyncpg.Pool)
BUS = web.AppKey("bus", Bus)
SETTINGS = web.AppKey("settings", Settings)
# The service tasks of this process that stopped on their own, by name.
DEAD_TASKS = web.AppKey("dead_tasks", Callable[[], list[str]])
# This process's runner's sandbox as described, and whether it refuses runs.
SANDBOX = web.AppKey("sandbox", Callable[[], tuple[str | None, bool]])
# The folder of the run viewer's built files (services/api/ui_routes.DIST unless a test
# serves another).
UI_DIST = web.AppKey("ui_dist", Path)

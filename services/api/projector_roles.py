"""Which projector process folds and which stand by, for /healthz and /metrics.

Read from DBT_PROJECTORS (projections/active.py). The API keeps its own sightings of the
keys, so a process that was SIGKILLed drops out once its key goes unrenewed for its term
between two reads, as a standby judges it, without trusting any host's clock.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from jetdbt.projections.active import Roles, Sightings, roles
from jetdbt.services.api.run_metrics import label

__all__ = ["install", "projector_roles", "roles_metric", "METRIC"]

SIGHTINGS = web.AppKey("projector_sightings", Sightings)
METRIC = "jetdbt_projector_process"


def install(app: web.Application) -> None:
    app[SIGHTINGS] = Sightings()


async def projector_roles(app: web.Application, bus, deadline: float) -> Roles | None:
    """The roles, or None when NATS did not answer within `deadline` seconds."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(deadline):
            return await roles(bus, app[SIGHTINGS])
    return None


def roles_metric(found: Roles | None) -> str:
    """One line per projector process known: 1, labelled with its name and role."""
    lines = [
        f"# HELP {METRIC} A projector process: role active (it folds) or standby.",
        f"# TYPE {METRIC} gauge",
    ]
    if found is not None:
        named = [(found.active, "active")] if found.active else []
        named += [(name, "standby") for name in found.standbys]
        lines += [f'{METRIC}{{process="{label(n)}",role="{r}"}} 1' for n, r in named]
    return "\n".join(lines) + "\n"

"""Operations routes: how far each projection is behind, and what it could not apply.

`/metrics` says the same as `/v1/projections` in Prometheus text format, so a
scraper alerts on lag or dead letters without knowing jetdbt, and which projector
process folds (`jetdbt_projector_process`, services/api/projector_roles.py). Dead letters are
listed a page at a time, each with the first bytes of what it stored
(projections/upkeep/queries.py).
"""

from __future__ import annotations

import functools

from aiohttp import web
from jetdbt.projections import lag
from jetdbt.projections.upkeep import queries
from jetdbt.services.api import schemas
from jetdbt.services.api.boundary import page, query, respond
from jetdbt.services.api.keys import BUS, POOL
from jetdbt.services.api.principal_metrics import principal_metrics
from jetdbt.services.api.projector_roles import projector_roles, roles_metric
from jetdbt.services.api.queue_metrics import queue_metrics
from jetdbt.services.api.run_metrics import label, run_metrics
from jetdbt.shared.bus import contract

__all__ = ["routes", "prometheus", "DEAD_LETTERS_PAGE"]

DEAD_LETTERS_PAGE = (100, 1000)  # rows per page: default, maximum
# How long /metrics waits for DBT_PROJECTORS before it leaves the processes out.
ROLES_DEADLINE = 2.0
_GAUGES = (
    ("checkpoint", "jetdbt_projection_checkpoint", "Last sequence the projection applied."),
    ("lag", "jetdbt_projection_lag_events", "Events for the projection after its checkpoint."),
    ("dead_letters", "jetdbt_projection_dead_letters", "Events the projection could not apply."),
    ("stopped", "jetdbt_projection_stopped", "1 while a bug in the fold stops the projection."),
)

routes = web.RouteTableDef()


def _gauge(value) -> int:
    """A count as it is; a reason (a projection's `stopped`) as 1, its absence as 0."""
    return value if isinstance(value, int) else int(value is not None)


def prometheus(lags: lag.Lags) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    lines = [
        "# HELP jetdbt_stream_last_seq Last sequence stored in the stream.",
        "# TYPE jetdbt_stream_last_seq gauge",
        f'jetdbt_stream_last_seq{{stream="{lags.stream}"}} {lags.stream_last_seq}',
    ]
    for field, metric, help_text in _GAUGES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [
            f'{metric}{{projection="{label(p.projection)}"}} {_gauge(getattr(p, field))}'
            for p in lags.projections
        ]
    return "\n".join(lines) + "\n"


def _by_principal(found) -> str:
    lines = []
    for metric, help_text, counts in found:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [f'{metric}{{principal="{label(p)}"}} {n}' for p, n in sorted(counts.items())]
    return "\n".join(lines) + "\n"


@functools.cache
def _projections() -> dict[str, list[str]]:
    """Each projection of streams.yaml and the subjects it folds."""
    return contract.load().projections


async def _current(app: web.Application) -> lag.Lags:
    async with app[POOL].acquire() as conn:
        return await lag.lags(conn, app[BUS].js, _projections())


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    # Lags first: a scraper that reads lag 0 then finds every folded row in the rest.
    lags = prometheus(await _current(request.app))
    async with request.app[POOL].acquire() as conn:
        queue = await queue_metrics(conn) + await run_metrics(conn)
    bus = request.app[BUS]
    principals = _by_principal(await principal_metrics(bus.js))
    processes = roles_metric(await projector_roles(request.app, bus, ROLES_DEADLINE))
    return web.Response(
        body=(lags + queue + principals + processes).encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


@routes.get("/v1/projections")
async def list_projections(request: web.Request) -> web.Response:
    return respond(await _current(request.app))


@routes.get("/v1/dead-letters")
async def list_dead_letters(request: web.Request) -> web.Response:
    """Oldest first per projection, `?projection=` one of them, a page at a time."""
    want = page(request, *DEAD_LETTERS_PAGE)
    fetched = await queries.dead_letters(
        request.app[POOL], query(request, "projection"), want.limit + 1, want.offset
    )
    rows, after = want.rows(fetched)
    body = {"dead_letters": rows, "next": after}
    return respond(schemas.shaped(schemas.DeadLetters, body))

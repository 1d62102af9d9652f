"""Operations routes: how far each projection is behind, and what it could not apply.

`/metrics` says the same as `/v1/projections` in Prometheus text format, so a
scraper alerts on lag or dead letters without knowing jetdbt, and which projector
process folds (`jetdbt_projector_process`, services/api/projector_roles.py). Dead letters are
listed a page at a time, each with at most DATA_SHOWN bytes of what it stored.
"""

from __future__ import annotations

import asyncpg
from aiohttp import web
from jetdbt.projections import lag
from jetdbt.services.api import schemas
from jetdbt.services.api.boundary import page, query, respond
from jetdbt.services.api.principal_metrics import principal_metrics
from jetdbt.services.api.projector_roles import projector_roles, roles_metric
from jetdbt.services.api.queue_metrics import queue_metrics
from jetdbt.services.api.run_metrics import label, run_metrics
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.connection import Bus

__all__ = ["add_ops_routes", "prometheus", "DEAD_LETTERS_PAGE", "DATA_SHOWN"]

DEAD_LETTERS_PAGE = (100, 1000)  # rows per page: default, maximum
# An event is far below 1 MiB, yet a page of a thousand near it would not be: a dead
# letter shows its first 64 KiB (the reason is near the start) and says its size.
DATA_SHOWN = 64 * 1024
# How long /metrics waits for DBT_PROJECTORS before it leaves the processes out.
ROLES_DEADLINE = 2.0
_GAUGES = (
    ("checkpoint", "jetdbt_projection_checkpoint", "Last sequence the projection applied."),
    ("lag", "jetdbt_projection_lag_events", "Events for the projection after its checkpoint."),
    ("dead_letters", "jetdbt_projection_dead_letters", "Events the projection could not apply."),
    ("stopped", "jetdbt_projection_stopped", "1 while a bug in the fold stops the projection."),
)


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


def add_ops_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus) -> None:
    projections = contract.load().projections

    async def current() -> lag.Lags:
        async with pool.acquire() as conn:
            return await lag.lags(conn, bus.js, projections)

    async def metrics(request: web.Request) -> web.Response:
        # Lags first: a scraper that reads lag 0 then finds every folded row in the rest.
        lags = prometheus(await current())
        async with pool.acquire() as conn:
            queue = await queue_metrics(conn) + await run_metrics(conn)
        principals = _by_principal(await principal_metrics(bus.js))
        processes = roles_metric(await projector_roles(request.app, bus, ROLES_DEADLINE))
        return web.Response(
            body=(lags + queue + principals + processes).encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def list_projections(request: web.Request) -> web.Response:
        return respond(await current())

    async def list_dead_letters(request: web.Request) -> web.Response:
        """Oldest first per projection, `?projection=` one of them, a page at a time."""
        want = page(request, *DEAD_LETTERS_PAGE)
        async with pool.acquire() as conn:
            fetched = await conn.fetch(
                "SELECT id, projector, stream_seq, subject, error, failed_at,"
                " substring(data FROM 1 FOR $4) AS data, octet_length(data) AS data_size"
                " FROM dead_letters WHERE $1::text IS NULL OR projector = $1"
                " ORDER BY projector, stream_seq LIMIT $2 OFFSET $3",
                query(request, "projection"),
                want.limit + 1,
                want.offset,
                DATA_SHOWN,
            )
        rows, after = want.rows(fetched)
        # The stored bytes as text (invalid UTF-8 replaced): often the reason.
        listed = [{**dict(r), "data": bytes(r["data"]).decode(errors="replace")} for r in rows]
        body = {"dead_letters": listed, "next": after}
        return respond(schemas.shaped(schemas.DeadLetters, body))

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/projections", list_projections)
    app.router.add_get("/v1/dead-letters", list_dead_letters)

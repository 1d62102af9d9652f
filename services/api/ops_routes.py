"""Operations routes: how far each projection is behind, and what it could not apply.

`/metrics` says the same as `/v1/projections` in Prometheus text format, so a
scraper alerts on lag or dead letters without knowing jetdbt.
"""

from __future__ import annotations

import asyncpg
import msgspec
from aiohttp import web

from projections import dead_letters, lag
from shared import contract
from shared.bus import Bus

__all__ = ["add_ops_routes", "prometheus"]

_encoder = msgspec.json.Encoder()
DEAD_LETTERS_SHOWN = 100
_GAUGES = (
    ("checkpoint", "jetdbt_projection_checkpoint", "Last sequence the projection applied."),
    ("lag", "jetdbt_projection_lag_events", "Events for the projection after its checkpoint."),
    ("dead_letters", "jetdbt_projection_dead_letters", "Events the projection could not apply."),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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
            f'{metric}{{projection="{_label(p.projection)}"}} {getattr(p, field)}'
            for p in lags.projections
        ]
    return "\n".join(lines) + "\n"


def add_ops_routes(app: web.Application, pool: asyncpg.Pool, bus: Bus) -> None:
    projections = contract.load().projections

    async def current() -> lag.Lags:
        async with pool.acquire() as conn:
            return await lag.lags(conn, bus.js, projections)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=prometheus(await current()).encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def list_projections(request: web.Request) -> web.Response:
        return web.Response(body=_encoder.encode(await current()), content_type="application/json")

    async def list_dead_letters(request: web.Request) -> web.Response:
        try:
            limit = min(int(request.query.get("limit", DEAD_LETTERS_SHOWN)), 1000)
        except ValueError:
            body = {"error": "limit must be a whole number"}
            return web.Response(
                body=_encoder.encode(body), status=400, content_type="application/json"
            )
        projector = request.query.get("projection")
        async with pool.acquire() as conn:
            rows = await dead_letters.listing(conn, projector, limit)
        body = {"dead_letters": rows}
        return web.Response(body=_encoder.encode(body), content_type="application/json")

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/projections", list_projections)
    app.router.add_get("/v1/dead-letters", list_dead_letters)

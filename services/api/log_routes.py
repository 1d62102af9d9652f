"""`GET /v1/runs/{run_id}/logs`: a run's log lines, a page at a time or followed.

Lines are numbered from 1 and read with `jetdbt.shared.runs.run_logs`: from DBT_LOGS while it holds
them all, from the run's kept object after. A page is `?after=<line number>` (default
0) and `?limit=` (default 1000, at most 5000); its `next` is `{"after": N}` while the run
goes or more lines follow, `null` once the run has ended and the page is the last.
`?follow=true` answers NDJSON instead: `{"line": n, "text": ...}` per line as it is
written, an empty line every 15 s as a keepalive, and a last `{"end": status}` (passed,
failed, cancelled, refused...) when the run has ended; then it closes.
"""

from __future__ import annotations

import msgspec
from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import MAX_OFFSET, BadParameter, error, path, query, respond
from jetdbt.services.api.keys import BUS
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.runs import run_logs

__all__ = ["routes", "LOG_PAGE", "KEEPALIVE_SECONDS"]

LOG_PAGE = (1000, 5000)  # lines per page: (default, maximum)
KEEPALIVE_SECONDS = 15.0
_FLAGS = {"true": True, "1": True, "false": False, "0": False, "": False}

routes = web.RouteTableDef()


def _after(request: web.Request) -> int:
    value = query(request, "after", "0")
    if not value.isascii() or not value.isdigit() or int(value) > MAX_OFFSET:
        raise BadParameter(
            f"query parameter 'after' is {value[:40]!r}: expected a line number"
            f" (a whole number from 0 to {MAX_OFFSET})"
        )
    return int(value)


def _follow(request: web.Request) -> bool:
    value = request.query.get("follow", "")
    if value not in _FLAGS:
        raise BadParameter(f"query parameter 'follow' is {value[:40]!r}: expected true or false")
    return _FLAGS[value]


@routes.get("/v1/runs/{run_id}/logs")
async def run_logs_route(request: web.Request) -> web.StreamResponse:
    run_id = path(request, "run_id")
    after, follow = _after(request), _follow(request)
    limit = min(query(request, "limit", LOG_PAGE[0]), LOG_PAGE[1])
    found = await run_logs.find(request.app[BUS], run_id)
    if found is None:
        return error(404, f"run {run_id!r} not found")
    # The log may hold a run the projection has yet to fold (then `authorize` found no
    # project to scope): scope it by the project its events are filed under.
    refused = await auth.project_problem(request, found.project)
    if refused is not None:
        return refused
    try:
        if follow:
            return await _followed(request, found, after)
        lines, source = await found.page(after, limit)
    except run_logs.LogGone as exc:
        return error(410, str(exc))
    more = len(lines) > limit
    lines = lines[:limit]
    last = lines[-1].line if lines else after
    body = {
        "run_id": run_id,
        "project": found.project,
        "status": found.status,
        "source": source,
        "lines": lines,
        "next": {"after": last} if more or found.final is None else None,
    }
    return respond(schemas.shaped(schemas.RunLog, body))


async def _followed(request: web.Request, found: run_logs.RunLog, after: int) -> web.StreamResponse:
    if found.pruned is not None:  # refused before the stream opens, as a 410
        await found.page(after, 1)
    resp = web.StreamResponse(
        headers={
            "Content-Type": "application/x-ndjson",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a buffering proxy would hold lines back
        }
    )
    await resp.prepare(request)
    log = jlog.get("api", project=found.project, run_id=found.run_id)
    sent = 0
    try:
        async for line in found.follow(after, tick=KEEPALIVE_SECONDS):
            await resp.write(b"\n" if line is None else msgspec.json.encode(line) + b"\n")
            sent += line is not None
        await resp.write(msgspec.json.encode({"end": found.status}) + b"\n")
        await resp.write_eof()
    except ConnectionResetError:  # the client went away: nothing to answer
        log.info("log_follow_closed_by_client", sent=sent)
        return resp
    log.info("log_follow_ended", sent=sent, status=found.status)
    return resp

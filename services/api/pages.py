"""A project's rows a page at a time: the one way every project list route reads its page,
cuts it, and says where the next one starts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from jetdbt.projections.answers import Database, shaped
from jetdbt.services.api.boundary import page, path, respond
from jetdbt.services.api.keys import POOL

__all__ = ["project_page", "Read"]

# A query of one project's rows: (db, project, limit, offset).
Read = Callable[[Database, str, int, int], Awaitable[list]]


async def project_page(
    request: web.Request, key: str, sizes: tuple[int, int], read: Read, schema: type
) -> web.Response:
    """One page of the project's rows `read` answers, under `key`, and the next page's query
    (`sizes`: the page's default and maximum)."""
    project = path(request, "project")
    want = page(request, *sizes)
    rows, after = want.rows(await read(request.app[POOL], project, want.limit + 1, want.offset))
    return respond(shaped(schema, {"project": project, key: rows, "next": after}))

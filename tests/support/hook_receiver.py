"""A webhook receiver for tests: a real HTTP server that answers each POST with the next
status it was given and keeps what it was sent."""

from __future__ import annotations

from aiohttp import web

__all__ = ["Receiver"]


class Receiver:
    """A real HTTP server answering each POST with the next status of `statuses` (the last
    one from then on), keeping what it was sent."""

    def __init__(self, *statuses: int):
        self.statuses, self.got = list(statuses), []

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/hook", self._post)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}/hook"

    async def _post(self, request: web.Request) -> web.Response:
        self.got.append((dict(request.headers), await request.read()))
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return web.Response(status=status)

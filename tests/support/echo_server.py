"""A loopback server standing for a warehouse's host behind the egress gate (the gate's
unit tests and the end-to-end egress attacks)."""

from __future__ import annotations

import asyncio

__all__ = ["Stand"]


class Stand:
    """A loopback server standing for a warehouse's host: it echoes what it gets, records
    it, and notes each connection that ended."""

    def __init__(self) -> None:
        self.got: list[bytearray] = []
        self.ended = 0
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer) -> None:
        got = bytearray()
        self.got.append(got)
        try:
            while data := await reader.read(65536):
                got += data
                writer.write(data)
                await writer.drain()
        finally:
            self.ended += 1
            writer.close()

"""A TCP port on a private address that forwards to a local server (a unix socket or a
loopback port): how a warehouse on this machine is reached from a test's other "hosts"."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

__all__ = ["Forward"]


class Forward:
    """Listen on `host` (any free port) and pipe each connection to `socket` or `target`."""

    def __init__(self, host: str, *, socket: Path | None = None, target: tuple | None = None):
        self.host, self.socket, self.target = host, socket, target
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task] = set()

    async def start(self) -> Forward:
        self._server = await asyncio.start_server(self._on_client, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _on_client(self, reader, writer) -> None:
        try:
            if self.socket is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(str(self.socket))
            else:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for pipe in (_pipe(reader, up_writer), _pipe(up_reader, writer)):
            task = asyncio.create_task(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()

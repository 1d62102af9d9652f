"""The egress gate: an HTTP proxy in the runner, the only way out a sandboxed run has for
HTTP(S). Each invocation gets a listener of its own on a unix socket (its sandbox's relay joins
it to 127.0.0.1:3128 inside), with that invocation's policy; a CONNECT or an absolute-URI
request goes through only to a host the policy allows, resolved here, and every refusal is
answered 403, told in the run's log, logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NoReturn

from jetdbt.services.runner.egress.head import BadRequest, parse
from jetdbt.services.runner.egress.hosts import EgressPolicy
from jetdbt.services.runner.egress.resolve import AddressRefused, Resolver
from jetdbt.shared.process import logging as jlog

__all__ = ["Gate"]

_log = jlog.get("egress.gate")
_HEAD_LIMIT = 16 * 1024
_WAIT = 30.0  # seconds for a request head, a name's resolution, one address's connect
_MAX_TUNNELS = 256  # open connections one invocation may hold
_CHUNK = 64 * 1024
_LINGER = 1.0
_PATH_LIMIT = 107  # bytes of a unix socket's path
_TOLD = 32  # hosts one invocation's refusals are told and logged for; the rest are counted
_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
Say = Callable[[str], Awaitable[None]]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(eq=False)
class _Listener:
    """One invocation's socket, what it may reach, and the connections it holds open."""

    path: Path
    policy: EgressPolicy
    say: Say | None
    labels: dict[str, str]
    server: asyncio.AbstractServer | None = None
    tasks: set[asyncio.Task] = field(default_factory=set)
    told: set[tuple[str, int]] = field(default_factory=set)  # refusals told and logged
    closed: bool = False


class _Answer(Exception):
    """The answer a request gets instead of a way through."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


class Gate:
    """The runner's gate: one listener per sandboxed invocation, one folder for them all."""

    def __init__(self, hosts_file: Path | None) -> None:
        self.resolver = Resolver(hosts_file)  # the relay's endpoints are named by it too
        self._folder: Path | None = None
        self._listeners: dict[str, _Listener] = {}
        self._refused = 0

    async def open(self, name: str, policy: EgressPolicy, say: Say | None = None,
                   **labels: str) -> str:  # fmt: skip
        """Start invocation `name`'s listener; return its unix socket path."""
        if name in self._listeners:
            raise ValueError(f"egress gate: {name!r} has a listener already: close it first")
        if self._folder is None:
            # Not listable by others: a socket's unguessable name is what lets a relay in.
            self._folder = Path(tempfile.mkdtemp(prefix="jetdbt-gate-"))
            self._folder.chmod(0o711)
        listener = _Listener(self._folder / f"{secrets.token_hex(16)}.sock", policy, say, labels)
        if len(bytes(listener.path)) > _PATH_LIMIT:
            raise ValueError(
                f"egress gate: {listener.path} is longer than a unix socket's {_PATH_LIMIT}"
                " bytes: point TMPDIR at a short folder"
            )
        listener.server = await asyncio.start_unix_server(
            partial(self._serve, listener), path=str(listener.path), limit=_HEAD_LIMIT
        )
        os.chmod(listener.path, 0o666)  # the relay connects as the sandbox's uid
        self._listeners[name] = listener
        return str(listener.path)

    async def close(self, name: str) -> None:
        """Stop `name`'s listener and cut every tunnel it still has open (a killed run
        leaves nothing that still writes)."""
        listener = self._listeners.pop(name, None)
        if listener is None:
            return
        listener.closed = True
        listener.server.close()
        tasks = list(listener.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listener.server.wait_closed()
        listener.path.unlink(missing_ok=True)

    def describe(self) -> str:
        return f"egress gate: {self._refused} requests refused since start"

    async def stop(self) -> None:
        """Every listener closed, its folder removed."""
        for name in list(self._listeners):
            await self.close(name)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    async def _serve(self, listener: _Listener, reader, writer) -> None:
        task = asyncio.current_task()
        listener.tasks.add(task)
        try:
            await self._handle(listener, reader, writer)
        except asyncio.CancelledError:
            pass  # close() cut it (Python 3.11's streams log a cancelled handler as an error)
        except Exception as exc:  # one connection's fault never reaches the runner
            _log.error("egress_failed", error=repr(exc), **listener.labels)
        finally:
            listener.tasks.discard(task)
            writer.close()

    async def _handle(self, listener: _Listener, reader, writer) -> None:
        upstream: Streams | None = None
        try:
            if listener.closed:
                return
            if len(listener.tasks) > _MAX_TUNNELS:
                _log.warning("egress_busy", open=_MAX_TUNNELS, **listener.labels)
                raise _Answer(503, f"at most {_MAX_TUNNELS} connections at once per run")
            upstream = await self._way_through(listener, reader, writer)
            if upstream is not None:
                await _pipe((reader, writer), upstream)
        except _Answer as answer:
            await _answer((reader, writer), answer.status, str(answer))
        finally:
            if upstream is not None:
                upstream[1].close()

    async def _way_through(self, listener: _Listener, reader, writer) -> Streams | None:
        """The open connection to where the request goes (its head sent, or CONNECT's 200
        answered); None when the client left before asking."""
        try:
            async with asyncio.timeout(_WAIT):
                head = await reader.readuntil(b"\r\n\r\n")
            request = parse(head)
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            raise _Answer(431, f"the request head is over {_HEAD_LIMIT} bytes") from None
        except TimeoutError:
            raise _Answer(408, f"no request head within {_WAIT:.0f} s") from None
        except BadRequest as exc:
            raise _Answer(exc.status, str(exc)) from None
        host, port, policy = request.host, request.port, listener.policy
        if not policy.allows(host, port):
            await self._refuse(listener, policy.refusal(host, port), host, port, "not allowed")
        resolved = None
        try:
            async with asyncio.timeout(_WAIT):
                resolved = await self.resolver.addresses(host, port)
            upstream = await _connect(resolved.addresses)
        except AddressRefused as exc:
            await self._refuse(listener, str(exc), host, port, "address")
        except OSError as exc:  # TimeoutError is one
            source = resolved.source if resolved else "dns"
            _log.warning("egress_unreachable", host=host, port=port, source=source,
                         error=str(exc) or "timed out", **listener.labels)  # fmt: skip
            raise _Answer(502, f"{host}:{port} cannot be reached ({exc or 'timed out'})") from None
        if request.forward is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(request.forward)
        return upstream

    async def _refuse(
        self, listener: _Listener, text: str, host: str, port: int, why: str
    ) -> NoReturn:
        """Count a refusal and answer it 403; tell the run and log it once per host and port,
        for at most _TOLD of them (a run asking for host after host floods neither log)."""
        self._refused += 1
        if (host, port) not in listener.told and len(listener.told) <= _TOLD:
            listener.told.add((host, port))
            line = text
            if len(listener.told) > _TOLD:
                line = f"more than {_TOLD} hosts refused: the others are refused and counted"
                _log.warning("egress_refused_many", told=_TOLD,
                             warehouse=listener.policy.warehouse, **listener.labels)  # fmt: skip
            else:
                _log.warning("egress_refused", host=host, port=port, reason=why,
                             warehouse=listener.policy.warehouse, **listener.labels)  # fmt: skip
            if listener.say is not None:
                await listener.say(f"jetdbt egress gate: {line}")
        raise _Answer(403, text)


async def _connect(addresses: list[tuple[int, tuple]]) -> Streams:
    """A connection to the first of `addresses` that answers, each given its own wait."""
    loop, failures = asyncio.get_running_loop(), []
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            async with asyncio.timeout(_WAIT):
                await loop.sock_connect(sock, sockaddr)
            return await asyncio.open_connection(sock=sock)
        except BaseException as exc:
            sock.close()
            if not isinstance(exc, OSError):
                raise
            failures.append(f"{sockaddr[0]}: {exc or 'timed out'}")
    raise OSError("; ".join(failures) or "no address")


async def _pipe(client: Streams, upstream: Streams) -> None:
    """Bytes both ways until both have ended."""
    both = (client[1], upstream[1])
    await asyncio.gather(_pump(client[0], upstream[1], both), _pump(upstream[0], client[1], both))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, both) -> None:
    """One direction; its end ends only that direction (a client that has sent all it will
    still gets its answer), a broken side ends both."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        for side in both:
            side.transport.abort()


async def _answer(client: Streams, status: int, text: str) -> None:
    """Answer and end; what the client still sends is read and dropped for a moment, as a
    socket closed with unread bytes is reset and the client would lose its answer."""
    reader, writer = client
    body = f"{text}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):  # TimeoutError is one
        await writer.drain()
        writer.write_eof()
        async with asyncio.timeout(_LINGER):
            while await reader.read(_CHUNK):
                pass

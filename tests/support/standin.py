"""A loopback HTTPS server standing for a cloud's hosts (Snowflake's account host, Google's
OAuth), so a real adapter's session goes somewhere without the internet.

It listens on port 443 of a random 127.A.B.C (tests run as root; two xdist workers keep
apart) with a self-signed certificate for the names it stands for, made by the `openssl`
command line. It records each connection's SNI (known from the ClientHello, even when the
client then refuses the certificate) and, where TLS completes, each request it reads on
it, and answers each with the canned response of the first path prefix that matches. The
gate finds it through the hosts-file line `hosts_line()` (JETDBT_EGRESS_HOSTS_FILE).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import random
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import msgspec

__all__ = ["Answer", "Request", "Seen", "StandIn"]

_HEAD_LIMIT, _BODY_LIMIT = 64 << 10, 4 << 20


class Answer(msgspec.Struct, frozen=True):
    """What a request whose path starts with some prefix gets."""

    status: int
    body: dict


class Request(msgspec.Struct, frozen=True):
    line: str  # `POST /path?query HTTP/1.1`
    body: bytes  # as sent, gunzipped when its Content-Encoding says gzip

    @property
    def path(self) -> str:
        return self.line.split(" ")[1].split("?")[0] if self.line.count(" ") >= 2 else ""


class Seen(msgspec.Struct):
    """One connection: the name the client asked for, each request it sent once TLS
    completed (a client keeps its connection for the next), or why it ended early."""

    sni: str | None
    requests: list[Request] = []
    error: str | None = None


class StandIn:
    """Stands for `names` at a random loopback address, port 443, answering by path prefix
    with `answers`; `folder` keeps its certificate (trust it with `certificate`)."""

    def __init__(self, folder: Path, names: tuple[str, ...], answers: dict[str, Answer]):
        self.names, self.answers = names, answers
        self.seen: list[Seen] = []
        self.certificate, key = folder / "standin.pem", folder / "standin.key"
        _self_signed(names, self.certificate, key)
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(self.certificate, key)
        self._tls.sni_callback = self._sni
        self._sock, self.address = _bind_somewhere_on_loopback(443)
        self._thread = threading.Thread(target=self._serve, name="standin", daemon=True)
        self._thread.start()

    def hosts_line(self) -> str:
        return f"{self.address} {' '.join(self.names)}\n"

    def requests_to(self, name: str) -> list[Request]:
        """Every request that came over TLS to `name` (by its SNI)."""
        return [r for s in self.seen if s.sni == name for r in s.requests]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)

    def _sni(self, conn: ssl.SSLSocket, name: str | None, _context) -> None:
        """Called with the ClientHello: the connection's record is set on it before."""
        conn.seen.sni = name

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(raw,), daemon=True).start()

    def _one(self, raw: socket.socket) -> None:
        seen = Seen(sni=None)
        self.seen.append(seen)
        raw.settimeout(30)
        try:
            conn = self._tls.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
            conn.seen = seen
            conn.do_handshake()
        except (ssl.SSLError, OSError) as exc:
            seen.error = f"{type(exc).__name__}: {exc}"
            raw.close()
            return
        with conn:
            try:
                while request := _read_request(conn):
                    seen.requests.append(request)
                    conn.sendall(self._response(request.path))
            except (ssl.SSLError, OSError, ValueError) as exc:
                seen.error = f"{type(exc).__name__}: {exc}"

    def _response(self, path: str) -> bytes:
        answer = next(
            (a for prefix, a in self.answers.items() if path.startswith(prefix)),
            Answer(404, {"error": f"the stand-in has no answer for {path!r}"}),
        )
        body = msgspec.json.encode(answer.body)
        head = (
            f"HTTP/1.1 {answer.status} Stand-in\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body


def _read_request(conn: ssl.SSLSocket) -> Request | None:
    """The next request on `conn` (its body by Content-Length); None once the client
    closed its connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk and not data:
            return None
        if not chunk or len(data) > _HEAD_LIMIT:
            raise ValueError("the request ended before its head did")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    length = int(headers.get("content-length") or 0)
    if length > _BODY_LIMIT:
        raise ValueError(f"a body of {length} bytes: the stand-in reads {_BODY_LIMIT} at most")
    while len(body) < length:
        chunk = conn.recv(min(length - len(body), 1 << 16))
        if not chunk:
            raise ValueError("the request ended before its body did")
        body += chunk
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return Request(line=line, body=body)


def _bind_somewhere_on_loopback(port: int) -> tuple[socket.socket, str]:
    """A listening socket on `port` of a random 127.A.B.C that is free."""
    for _ in range(50):
        address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        sock = socket.socket()
        try:
            sock.bind((address, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                continue
            raise
        sock.listen(16)
        return sock, address
    raise OSError(errno.EADDRINUSE, f"no free loopback address for port {port}")


def _self_signed(names: tuple[str, ...], certificate: Path, key: Path) -> None:
    alt = ",".join(f"DNS:{n}" for n in names)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", f"/CN={names[0]}", "-addext", f"subjectAltName={alt}",
         "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True,
    )  # fmt: skip

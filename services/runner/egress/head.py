"""What a run asks the egress gate for: the head of one HTTP/1.x proxy request, read strictly
(ASCII, CRLF lines, no folding) because a plain request is sent on rebuilt from it, and a
head the gate read one way and a server another could reach a host the gate never checked.
"""

from __future__ import annotations

import re

import msgspec
from jetdbt.services.runner.egress.hosts import is_host, split_port

__all__ = ["BadRequest", "Request", "parse"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_VERSION = re.compile(r"HTTP/1\.[01]\Z")
_VALUE = re.compile(r"[\t\x20-\x7e]*\Z")
_TARGET = re.compile(r"[\x21-\x7e]+\Z")
_URI = re.compile(r"([^/?#]*)(.*)", re.DOTALL)  # authority, then path, query, fragment
# Hop-by-hop headers and the proxy's own: the gate forwards one request and then closes.
_DROPPED = {"connection", "keep-alive", "upgrade", "te", "trailer", "host"}


class BadRequest(ValueError):
    """A head the gate cannot act on; `status` is the answer's code."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Request(msgspec.Struct, frozen=True):
    """Where the request goes; `forward` is the head to send there (None: a CONNECT)."""

    host: str
    port: int
    forward: bytes | None = None


def parse(head: bytes) -> Request:
    """The request in `head` (its bytes up to and including the blank line)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("the request head is not ASCII") from None
    lines = text[: -len("\r\n\r\n")].split("\r\n")
    if any("\r" in line or "\n" in line for line in lines):
        raise BadRequest("the request head has a bare CR or LF: end each line with CRLF")
    method, target, version = _request_line(lines[0])
    headers = [_header(line) for line in lines[1:]]
    if method == "CONNECT":
        return Request(*_authority(target, None))
    scheme, _, rest = target.partition("://")
    if scheme.lower() == "https":
        raise BadRequest(f"{target!r}: ask for an https:// URI with CONNECT, not {method}")
    if scheme.lower() != "http" or not rest:
        raise BadRequest(
            f"{target!r} is no absolute http:// URI: this is a proxy, send CONNECT host:port"
            " or an absolute URI"
        )
    where, path = _URI.match(rest).groups()
    host, port = _authority(where, 80)
    origin = path.partition("#")[0]
    origin = origin if origin.startswith("/") else "/" + origin
    kept = [(n, v) for n, v in headers if n.lower() not in _DROPPED and not _proxy_only(n)]
    name = f"[{host}]" if ":" in host else host
    out = [f"{method} {origin} {version}", f"Host: {name}" + (f":{port}" if port != 80 else "")]
    out += [f"{n}: {v}" for n, v in kept] + ["Connection: close", "", ""]
    return Request(host, port, "\r\n".join(out).encode("ascii"))


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    """`host:port`, `[v6]:port`, or `host` alone where a default port is given."""
    if "@" in text:
        raise BadRequest(f"{text!r}: a proxy request names no user (drop 'user@')")
    try:
        host, port = split_port(text, "the request's target")
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if not is_host(host) or (":" in host and not text.startswith("[")):  # v6 in brackets
        raise BadRequest(f"{text!r} names no host (a name, an IPv4 address or [IPv6]:port)")
    port = port or default_port
    if port is None:
        raise BadRequest(f"{text!r} names no port: CONNECT host:port")
    return host, port


def _request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    shapes = (_TOKEN, _TARGET, _VERSION)
    if len(parts) != 3 or not all(s.match(p) for s, p in zip(shapes, parts, strict=True)):
        raise BadRequest(f"{line[:200]!r} is no request line (METHOD target HTTP/1.1)")
    return parts[0], parts[1], parts[2]


def _header(line: str) -> tuple[str, str]:
    name, colon, value = line.partition(":")
    if not colon or not _TOKEN.match(name) or not _VALUE.match(value):
        raise BadRequest(f"{line[:200]!r} is no header line (Name: value)")
    return name, value.strip(" \t")


def _proxy_only(name: str) -> bool:
    return name.lower().startswith("proxy-")

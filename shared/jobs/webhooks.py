"""What a webhook is on the wire: its events, its URL rules, its signature headers.

A receiver checks `X-Jetdbt-Signature: sha256=<hex>`, HMAC-SHA256 with the hook's secret
over `<X-Jetdbt-Timestamp>.<body bytes>` exactly as received, and may refuse an old
timestamp (a replayed delivery); `X-Jetdbt-Delivery` is the same on every attempt of one
delivery, so a receiver that got it already can answer 2xx and do nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import urllib.parse
from typing import Literal, get_args

import msgspec
from jetdbt.shared.wording.short_quote import quote

__all__ = [
    "EVENTS",
    "DeliveryState",
    "DELIVERY_STATES",
    "SIGNATURE",
    "TIMESTAMP",
    "DELIVERY",
    "MAX_HOOKS",
    "MAX_SECRET",
    "MIN_SECRET",
    "BadHook",
    "HookReply",
    "HookRequest",
    "check_address",
    "check_events",
    "check_secret",
    "check_url",
    "listed",
    "new_secret",
    "sign",
    "wanted",
]

# What a hook may be told of a run: its start, its success, its failure, or any end.
EVENTS = ("start", "success", "failure", "end")
# How a delivery attempt ended: delivered, to be tried again, or given up (the dead letter).
DeliveryState = Literal["delivered", "retrying", "dead"]
DELIVERY_STATES: tuple[str, ...] = get_args(DeliveryState)
SIGNATURE = "X-Jetdbt-Signature"
TIMESTAMP = "X-Jetdbt-Timestamp"
DELIVERY = "X-Jetdbt-Delivery"
MIN_SECRET, MAX_SECRET = 16, 256
MAX_URL = 2048
# Hooks a project may have: each is told of every run, and the notifier reads them all for
# every run's start and end, so one project's many would slow every other's deliveries.
MAX_HOOKS = 20


class BadHook(ValueError):
    """A hook that cannot be saved as asked; the message says why."""


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for `body` sent at `timestamp` (Unix seconds)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def wanted(on: list[str], event: str) -> bool:
    """Whether a hook listening to `on` is told of `event` (start, success, failure)."""
    return event in on or (event != "start" and "end" in on)


def check_events(on: list[str]) -> list[str]:
    unknown = [e for e in on if e not in EVENTS]
    if not on or unknown:
        raise BadHook(
            f"--on {quote(','.join(unknown or on))} is not one of {', '.join(EVENTS)}"
            if on
            else f"a hook needs at least one --on of {', '.join(EVENTS)}"
        )
    return sorted(set(on), key=EVENTS.index)


def check_secret(secret: str) -> str:
    if not MIN_SECRET <= len(secret) <= MAX_SECRET or not secret.isprintable():
        raise BadHook(
            f"a hook's secret is {MIN_SECRET} to {MAX_SECRET} printable characters"
            f" (this one has {len(secret)})"
        )
    return secret


# An IPv4 address spelled otherwise than as four decimal parts (one number, hex, octal,
# parts left out): resolvers read it as an address, so it is refused as a name.
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A unicast address on the internet, an IPv4 one carried inside IPv6 (mapped, 6to4,
    NAT64) judged as itself: Python's is_global alone passes ::7f00:1, 64:ff9b::7f00:1 and
    multicast."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return _public(inner)
    return address.is_global and not (address.is_multicast or address.is_reserved)


def _private(host: str) -> bool:
    """Loopback, private, link-local, unspecified or any other address no public receiver
    has: inside the operator's own network, which a hook reaches only when listed."""
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not _public(address)


def listed(host: str, allowed: tuple[str, ...]) -> bool:
    """Whether the operator named `host` in JETDBT_WEBHOOK_HOSTS, itself or by `*.domain`
    (`*` alone names no host: it allows public ones)."""
    host = host.lower().rstrip(".")
    return host in allowed or any(
        a.startswith("*.") and host.endswith(a[1:]) for a in allowed if a != "*"
    )


def check_address(host: str, address: str, allowed: tuple[str, ...]) -> None:
    """BadHook when `host`, not listed by name, resolved to `address` inside the operator's
    network: checked on every connection, so a DNS answer that changes after the hook was
    saved reaches no private address either."""
    if listed(host, allowed) or _public(ipaddress.ip_address(address.split("%")[0])):
        return
    raise BadHook(
        f"host {quote(host)} resolves to {address}, not a public address: the operator lists"
        " the host in JETDBT_WEBHOOK_HOSTS to allow it"
    )


def check_url(url: str, allowed: tuple[str, ...]) -> str:
    """The URL a hook may post to, or BadHook naming why not: http or https, a host, no
    credentials, and a host the operator allows (JETDBT_WEBHOOK_HOSTS: names, addresses,
    `*.domain`, or `*` for any public host; none set, no hook may be added)."""
    if len(url) > MAX_URL:
        raise BadHook(f"a hook's URL is at most {MAX_URL} characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise BadHook(f"hook URL {quote(url)} must be http or https")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise BadHook(f"hook URL {quote(url)} names no host")
    if parts.username or parts.password:
        raise BadHook("a hook's URL may not carry credentials; the signature authenticates")
    if all(_NUMERIC_LABEL.fullmatch(p) for p in host.split(".")) and not _dotted_quad(host):
        raise BadHook(
            f"host {quote(host)} spells an IPv4 address otherwise than as four decimal parts"
            " (such as 192.0.2.10): write the address so"
        )
    if listed(host, allowed) or ("*" in allowed and not _private(host)):
        return url
    if not allowed:
        raise BadHook("no webhook host is allowed here: the operator sets JETDBT_WEBHOOK_HOSTS")
    raise BadHook(
        f"host {quote(host)} is not in JETDBT_WEBHOOK_HOSTS"
        + (" (a loopback or private address must be listed by name)" if _private(host) else "")
    )


def _dotted_quad(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


class HookRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the API or the operator's CLI asks the notifier (subjects.hook_control): add a
    hook (its secret given, or "" for one generated) or remove one. `principal` is whom the
    door authenticated; only the API's account and the operator may publish the request."""

    action: Literal["add", "remove"]
    name: str
    url: str = ""
    on: list[str] = []
    job: str = ""
    secret: str = ""
    principal: str = ""


class HookReply(msgspec.Struct, frozen=True, kw_only=True):
    """The notifier's answer: the hook as saved, with its secret on an add only (the one
    time it is shown), or `error` naming why not."""

    name: str = ""
    url: str = ""
    on: list[str] = []
    job: str = ""
    secret: str = ""
    error: str = ""

"""Why a webhook delivery attempt failed, in jetdbt's own words: a small fixed vocabulary.

Of an answer only its status is read, and no exception's text is recorded: either can
carry the bytes a service behind a listed host sent back (`INFO {"server_id":…}` from a
NATS port), readable by every viewer of the project. A refused connection and an answer
that is not HTTP are one reason on purpose, so a hook's deliveries do not tell which
ports of a listed host are open. Older records said more: `served` maps them to the
vocabulary whenever they are read, so a replay still folds exactly what was recorded.
"""

from __future__ import annotations

import re

__all__ = [
    "BACKLOG_FULL", "NO_HTTP_ANSWER", "NOT_ALLOWED", "NOT_RESOLVED", "REASONS", "TIMED_OUT",
    "TLS_FAILED", "answered", "served",
]  # fmt: skip

NO_HTTP_ANSWER = "no HTTP answer"  # refused, reset, closed, or not HTTP: alike on purpose
TIMED_OUT = "timed out"
TLS_FAILED = "TLS failed"
NOT_RESOLVED = "host name not resolved"
NOT_ALLOWED = "not allowed by JETDBT_WEBHOOK_HOSTS"
BACKLOG_FULL = "given up: too many deliveries of this hook wait"
REASONS = (NO_HTTP_ANSWER, TIMED_OUT, TLS_FAILED, NOT_RESOLVED, NOT_ALLOWED, BACKLOG_FULL)

_ANSWERED = re.compile(r"answered [1-5][0-9][0-9]")
# What the notifier once recorded: `TypeName: its text`, or a sentence of its own.
_TYPE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:Error|Exception)):")
_BY_TYPE = {
    "TimeoutError": TIMED_OUT,
    "ServerTimeoutError": TIMED_OUT,
    "ConnectionTimeoutError": TIMED_OUT,
    "SocketTimeoutError": TIMED_OUT,
    "ClientSSLError": TLS_FAILED,
    "ClientConnectorSSLError": TLS_FAILED,
    "ClientConnectorCertificateError": TLS_FAILED,
    "SSLError": TLS_FAILED,
    "ClientConnectorDNSError": NOT_RESOLVED,
}


def answered(status: int) -> str:
    """A receiver's answer that was not 2xx (a redirect is not followed: it fails too)."""
    return f"answered {status}"


def served(error: str, status: int) -> str:
    """A recorded attempt's reason as it may be shown: one of the vocabulary, `answered N`,
    or "" (delivered). An older record's free text is mapped by what jetdbt wrote of it
    (the exception's type, a sentence of its own), never by the text it quoted."""
    if not error or error in REASONS or _ANSWERED.fullmatch(error):
        return error
    if status:
        return answered(status)
    typed = _TYPE.match(error)
    kind = typed.group(1) if typed else ""
    # Its own sentences, and its resolver's refusal (nothing was sent, so nothing quoted).
    if "JETDBT_WEBHOOK_HOSTS" in error and (not kind or kind.startswith("ClientConnector")):
        return NOT_ALLOWED
    if "given up" in error and not kind:
        return BACKLOG_FULL
    return _BY_TYPE.get(kind, NO_HTTP_ANSWER)

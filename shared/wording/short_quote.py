"""Quoting untrusted input inside a message: a short prefix, never the whole value.

Refusal reasons are stored and served; an attacker's 375 KB select list must not
become a 375 KB reason, nor a way to smuggle text into every reader's screen.
"""

from __future__ import annotations

__all__ = ["quote", "shorten", "storable", "QUOTED"]

QUOTED = 60


def quote(value: object, limit: int = QUOTED) -> str:
    """`repr` of at most `limit` characters of `value`, saying how long it really was."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def shorten(text: str, limit: int = 600) -> str:
    """`text` in at most about `limit` characters: its head and its tail (where a decoder
    names the field), so no message echoes a caller's long input whole."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}…({len(text) - limit} characters cut)…{text[-half:]}"


def storable(text: str, limit: int = 2000) -> str:
    """An error message Postgres can store (its text holds no NUL), bounded: an error that
    quotes a hostile event must not stop the projection that records it."""
    return shorten(text.replace("\x00", "\\x00"), limit)

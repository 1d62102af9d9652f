"""Quoting untrusted input inside a message: a short prefix, never the whole value.

Refusal reasons are stored and served; an attacker's 375 KB select list must not
become a 375 KB reason, nor a way to smuggle text into every reader's screen.
"""

from __future__ import annotations

__all__ = ["quote", "QUOTED"]

QUOTED = 60


def quote(value: object, limit: int = QUOTED) -> str:
    """`repr` of at most `limit` characters of `value`, saying how long it really was."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"

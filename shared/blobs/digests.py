"""Content digests, `sha256:` + 64 lowercase hex: made in one place, checked in one place.

Blobs, bundles, graphs and profiles are named by their digest, and a digest
travels in commands and events, so one that arrives from outside is checked
before anything (a path, a lookup) is built from it.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["digest_of", "check_digest", "short_digest"]

_VALID = re.compile(r"sha256:[0-9a-f]{64}\Z")


def digest_of(data: bytes) -> str:
    """The digest that names `data`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(value: str) -> str:
    """Return `value` if it is a digest as `digest_of` spells it, else raise ValueError."""
    if not isinstance(value, str) or not _VALID.match(value):
        raise ValueError(
            f"{str(value)[:40]!r} is not a content digest: expected 'sha256:' and 64"
            " lowercase hex digits"
        )
    return value


def short_digest(value: str) -> str:
    """A digest as a person reads it (a version in a message): `sha256:` and 12 hex digits."""
    return value[:19]

"""How old something is, as a person reads it at a glance: `8y`, `3d`, `2h`, `5m`, `12s`
(the viewer's spelling), never `272947532s`."""

from __future__ import annotations

__all__ = ["age"]

# Each unit with its length in seconds, largest first: an age is shown in the largest that
# fits it once.
_UNITS = (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60))


def age(seconds: float) -> str:
    """`seconds` in the largest whole unit it holds: 90 is `1m`, 3 days and 5 hours `3d`."""
    whole = max(0, int(seconds))
    for unit, length in _UNITS:
        if whole >= length:
            return f"{whole // length}{unit}"
    return f"{whole}s"

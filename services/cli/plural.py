"""A count as a person writes it: `1 relation`, `2 relations`, `0 rows`; the one place the
CLI picks a noun's number, so no line says `1 relations`."""

from __future__ import annotations

__all__ = ["counted"]


def counted(count: int, noun: str, many: str | None = None) -> str:
    """`count` and `noun`, plural unless it is 1: `many` when given (`analyses`), else `noun`
    with an s."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"

"""A count as a person writes it: `1 relation`, `2 relations`, `0 rows`; the one place the
CLI picks a noun's number, so no line says `1 relations`."""

from __future__ import annotations

__all__ = ["counted"]


# Nouns the CLI counts whose plural is not the noun and an s (dbt's resource types among them).
_IRREGULAR = {"analysis": "analyses", "saved query": "saved queries"}


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless it is 1."""
    return f"{count} {noun if count == 1 else _IRREGULAR.get(noun, noun + 's')}"

"""The rule for a value that becomes one of dbt's arguments: never empty, never a flag.

Selection items come from commands, descriptors and run arguments; dbt reads a
value that starts with '-' (`--empty`, `--target-path /elsewhere`) as an option of
its own. Commands are refused with this rule where they are decoded (naming the
field), and the runner builds every argument list through it.
"""

from __future__ import annotations

from shared.quote import quote

__all__ = ["check_value"]


def check_value(where: str, value: object) -> str:
    """Return `value` if it may follow a flag on dbt's command line, else raise ValueError."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} is empty")
    if value.lstrip().startswith("-"):
        raise ValueError(
            f"{where} is {quote(value)}: a value cannot start with '-' (it would reach dbt"
            " as a flag)"
        )
    return value

"""The rule for a value that becomes one of dbt's arguments: never empty, never a flag.

Selection items come from commands, descriptors and run arguments; dbt reads a
value that starts with '-' (`--empty`, `--target-path /elsewhere`) as an option of
its own. Commands are refused with this rule where they are decoded (naming the
field), and the runner builds every argument list through it.
"""

from __future__ import annotations

import re

from jetdbt.shared.wording.short_quote import quote

__all__ = ["DBT_WORDS", "TAKES", "check_macro", "check_value"]

# The dbt command each run command label is, as the words dbt's command line takes.
DBT_WORDS = {
    "build": ("build",),
    "run": ("run",),
    "test": ("test",),
    "seed": ("seed",),
    "snapshot": ("snapshot",),
    "source_freshness": ("source", "freshness"),
    "run_operation": ("run-operation",),
    "docs_generate": ("docs", "generate"),
    "show": ("show",),
    "compile": ("compile",),
    "close_pr": ("run-operation",),  # the runner's own macro (services/runner/setup/close_pr.py)
}
# The overrides each dbt command takes beyond select, exclude and vars: dbt has the flag for
# it. A command that sets one its dbt does not take is refused, naming it.
TAKES = {
    "build": frozenset({"full_refresh", "defer"}),
    "run": frozenset({"full_refresh", "defer"}),
    "test": frozenset({"defer"}),
    "seed": frozenset({"full_refresh"}),
    "snapshot": frozenset(),
    "source_freshness": frozenset(),
    "run_operation": frozenset(),
    "docs_generate": frozenset(),
    "show": frozenset({"defer"}),
    "compile": frozenset({"defer"}),
    "close_pr": frozenset(),
}
_MACRO = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


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


def check_macro(value: str) -> str:
    """A macro name for `dbt run-operation`: `name` or `package.name`, nothing else."""
    if not isinstance(value, str) or len(value) > 200 or not _MACRO.fullmatch(value):
        raise ValueError(
            f"macro is {quote(value)}: a macro name is `name` or `package.name`"
            " (letters, digits, underscores)"
        )
    return value

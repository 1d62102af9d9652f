"""Which selector methods a selection spells, and which of those read a state.

One home for the rule: the plan refuses state methods where they could only answer
wrong, the build's empty-selection check lets them match nothing, and deferral hands
dbt the state they compare against (--state). Nothing here resolves a selection:
dbt does (selection.py).
"""

from __future__ import annotations

__all__ = ["STATE_METHODS", "STATE_READERS", "selection_methods", "compares_state"]

# Methods that compare against a state directory (dbt's --state): the environment's
# published manifest (state:) and its run results (result:).
STATE_METHODS = frozenset({"state", "result"})
# Every method that reads something other than the project: source_status: compares
# sources.json, which only `dbt source freshness` writes.
STATE_READERS = STATE_METHODS | {"source_status"}


def selection_methods(items: list[str]) -> set[str]:
    """The selector methods (`state`, `result`, `tag`, ...) spelled in select/exclude items."""
    methods = set()
    for item in items:
        for part in item.replace(",", " ").split():
            head = part.lstrip("+@").split(":", 1)
            if len(head) == 2:
                methods.add(head[0].split(".", 1)[0])
    return methods


def compares_state(items: list[str]) -> bool:
    """Whether select/exclude items compare against a state directory."""
    return bool(selection_methods(items) & STATE_METHODS)

"""What `jetdbt parse PATH` prints: the graph dbt parsed, summed up for a person (how many
nodes of each type, where the data enters and where it ends, what dbt warned of), so a
parse answers in the terminal, not only at an API address that needs a token."""

from __future__ import annotations

import re

from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.watch import ERROR_LINES, printable

__all__ = ["graph_lines", "warning_lines"]

# Names listed on a line of roots or leaves; more are counted.
NAMES_SHOWN = 10
# What a test is: never a root nor a leaf of the data's flow, only a check on it.
_CHECKS = {"test", "unit_test"}
# Colour codes dbt may put around its level word.
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def _plural(kind: str, count: int) -> str:
    """A count of a dbt resource type, its words spaced: `2 unit tests`, `1 analysis`."""
    return counted(count, kind.replace("_", " "))


def _named(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "") if names else "none"


def graph_lines(nodes: list[dict], edges: list[dict]) -> list[str]:
    """The counts by resource type, the roots (nothing upstream) and the leaves (nothing
    downstream but tests) of the graph's `nodes` and `edges` (the API's graph)."""
    kinds: dict[str, int] = {}
    for node in nodes:
        kinds[node["resource_type"]] = kinds.get(node["resource_type"], 0) + 1
    flowing = {n["unique_id"]: n["name"] for n in nodes if n["resource_type"] not in _CHECKS}
    fed = {e["child"] for e in edges if e["parent"] in flowing}
    feeding = {e["parent"] for e in edges if e["child"] in flowing}
    roots = [name for uid, name in flowing.items() if uid not in fed]
    leaves = [name for uid, name in flowing.items() if uid not in feeding]
    counts = ", ".join(_plural(k, v) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return [
        f"  {_plural('node', len(nodes))}: {counts or 'none'}",
        f"  roots ({len(roots)}):  {_named(roots)}",
        f"  leaves ({len(leaves)}): {_named(leaves)}",
    ]


def warning_lines(log: list[str]) -> list[str]:
    """dbt's warnings among the lines of its log, each with the lines that follow it up to
    dbt's next time-stamped line, at most ERROR_LINES in all."""
    said: list[str] = []
    within = False
    for raw in log:
        line = _COLOUR.sub("", raw)
        stamped = re.match(r"\d\d:\d\d:\d\d  ", line) is not None
        if stamped:
            within = "[WARNING]" in line
            line = line[10:]
        if within and line.strip():
            said.append(f"  {line.strip()}")
    if len(said) > ERROR_LINES:
        said = [*said[: ERROR_LINES - 1], f"  ... {len(said) - ERROR_LINES + 1} more lines"]
    return [printable(line) for line in said] or ["  none"]

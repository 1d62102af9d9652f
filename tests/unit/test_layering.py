"""The rooms' rule, held: every module imports in a fresh interpreter, no module imports a
room above its own, and no import cycle exists between modules.

A room is a package under `jetdbt` (`shared`, `projections`) or under `jetdbt.services`.
What each room may import is ALLOWED below; the package docstrings say the same in words.
An import inside `if TYPE_CHECKING:` is a type's name, not an import at run time, and is
left out of both checks.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx

from tests.support.paths import ROOT

BELOW_API = {"shared", "projections"}
# Each room and the rooms it may import (its own is always allowed). `services` itself is a
# docstring: any room may name it (the sandbox finds the code's folder through it).
ALLOWED: dict[str, set[str]] = {
    "shared": set(),
    "projections": {"shared"},
    "services.runner": {"shared"},
    "services.audit": {"shared"},
    "services.access": {"shared"},
    "services.triggers": {"shared"},
    "services.api": BELOW_API,
    "services.notifier": BELOW_API | {"services.api"},
    "services.mcp": BELOW_API | {"services.api"},
}
ALLOWED["services.stack"] = set(ALLOWED) - {"services.stack"}
ALLOWED["services.cli"] = set(ALLOWED)
PACKAGES = ("shared", "projections", "services")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("jetdbt", *(parts[:-1] if parts[-1] == "__init__" else parts)))
            found[name] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The jetdbt modules `tree` imports at run time (a `from p import m` of a module m
    counts as importing p.m)."""
    found: set[str] = set()
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            pending += node.orelse
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        pending += ast.iter_child_nodes(node)
    return found


def import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in _imported(ast.parse(path.read_text(), str(path)), modules):
            if target != name:
                graph.add_edge(name, target)
    return graph


def room(module: str) -> str:
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def test_every_module_imports_in_a_fresh_interpreter():
    names = [n for n in _modules() if not n.endswith("__main__")]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_no_room_imports_a_room_above_it():
    upward = sorted(
        f"{a} imports {b}"
        for a, b in import_graph().edges
        if room(b) not in ALLOWED[room(a)] | {room(a), "services"}
    )
    assert upward == [], (
        "imports against the layering (tests/unit/test_layering.py):\n" + "\n".join(upward)
    )


def test_no_import_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == [], f"modules importing each other: {cycles}"


def test_every_room_is_known():
    assert {room(m) for m in _modules()} <= set(ALLOWED) | {"services"}


# SQL outside projections/, each with why: what it reads is not a projection's table.
SQL_ELSEWHERE = {
    # The roles and grants of a run on a Postgres warehouse: the warehouse's own catalog.
    "jetdbt.services.runner.setup.run_credentials",
}
_SQL = re.compile(r"\b(SELECT\s[\s\S]*\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b")
# What the API may import of a read model's room: its queries, the Structs they answer with,
# and its tables' column lists. Never its fold.
_READ_SIDE = {"queries", "answers", "tables"}


def _strings(tree: ast.AST) -> list[str]:
    """Every string literal and f-string's literal parts, docstrings left out."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_no_sql_outside_projections():
    found = sorted(
        name
        for name, path in _modules().items()
        if room(name) != "projections"
        and name not in SQL_ELSEWHERE
        and any(_SQL.search(s) for s in _strings(ast.parse(path.read_text())))
    )
    assert found == [], (
        f"SQL outside projections/ (a query belongs in projections/*/queries): {found}"
    )


def test_the_api_reads_projections_through_their_queries():
    modules = _modules()
    read_models = {
        name
        for name, path in modules.items()
        if path.name == "__init__.py" and name.startswith("jetdbt.projections.")
    }
    graph = import_graph()
    edges = [(a, b) for a, b in graph.edges if room(a) == "services.api"]
    wrong = sorted(
        f"{a} imports {b}"
        for a, b in edges
        if any(b.startswith(f"{model}.") for model in read_models)
        and b.rsplit(".", 1)[1] not in _READ_SIDE
    )
    assert wrong == [], "the API reaches past a projection's queries:\n" + "\n".join(wrong)
    queries = {f"{m}.queries" for m in read_models if f"{m}.queries" in modules}
    reached = set().union(*(nx.descendants(graph, a) for a, _ in edges))
    assert len(queries) >= 10 and queries <= reached, (
        f"queries the API never reads: {sorted(queries - reached)}"
    )

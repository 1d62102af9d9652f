"""docs/guide.md's adapter matrix says, per adapter jetdbt knows, what was shown here: its
adapters must be the code's list, and every test it names must exist, or a reader trusts
a row nothing checks."""

from __future__ import annotations

import ast
import re

from jetdbt.services.runner.provision.environments import KNOWN_ADAPTERS

from tests.support.paths import ROOT

GUIDE = ROOT / "docs" / "guide.md"
_NAMED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def _rows() -> list[list[str]]:
    """The matrix's rows, as cells: the table after the **Adapter matrix.** paragraph."""
    text = GUIDE.read_text().split("**Adapter matrix.**", 1)[1]
    lines = text.split("\n|", 1)[1].split("\n\n", 1)[0].splitlines()
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]


def _tests_in(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_the_matrix_has_a_row_for_each_adapter_the_code_knows():
    adapters = [row[0] for row in _rows()]
    assert len(adapters) == len(set(adapters)), adapters
    assert set(adapters) == KNOWN_ADAPTERS, (
        f"docs/guide.md's adapter matrix lacks {sorted(KNOWN_ADAPTERS - set(adapters))} and"
        f" names {sorted(set(adapters) - KNOWN_ADAPTERS)} the code does not know"
    )
    assert all(len(row) == 5 for row in _rows()), [r[0] for r in _rows() if len(r) != 5]


def test_every_test_the_matrix_names_exists():
    named = [(row[0], *m) for row in _rows() for m in _NAMED.findall(" ".join(row))]
    assert {"duckdb", "postgres", "sqlite", "snowflake", "bigquery"} <= {n[0] for n in named}
    missing = [
        f"{adapter}: {path}{'::' + function if function else ''}"
        for adapter, path, function in named
        if not (ROOT / path).is_file() or (function and function not in _tests_in(path))
    ]
    assert missing == [], f"docs/guide.md's adapter matrix names tests that do not exist: {missing}"

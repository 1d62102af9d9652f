"""The suite's own layout: every test file in the folder of its kind, and no test file
imported by another (what tests share lives in tests/support)."""

from __future__ import annotations

import ast

from tests.support.paths import TESTS

KINDS = ("unit", "stack", "with_dbt", "properties")


def test_every_test_file_is_in_the_folder_of_its_kind():
    misplaced = sorted(
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        if p.relative_to(TESTS).parts[0] not in KINDS
    )
    assert misplaced == [], f"test files outside {KINDS}: {misplaced}"


def test_no_test_file_imports_another():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            found += [
                f"{path.relative_to(TESTS)} imports {n}"
                for n in names
                if n.startswith("tests.") and any(p.startswith("test_") for p in n.split("."))
            ]
    assert found == [], "move what they share into tests/support:\n" + "\n".join(found)

"""Each projection's tables.py is the one definition of its tables' columns, and the three
places that spell them are held to it: the migrations make exactly those columns, every
statement a fold writes names only them, and every field of the answers its queries return is
one of them, an answer nested in it, or named in its module's COMPUTED with how it is made."""

from __future__ import annotations

import ast
import importlib
import re
import typing

import msgspec
from jetdbt.projections.answers import Answer
from jetdbt.projections.registry import TABLES

from tests.support.paths import ROOT
from tests.support.projection_pools import scratch_pool

READ_MODELS = sorted(p.parent.name for p in (ROOT / "projections").glob("*/tables.py"))
_INSERT = re.compile(r"INSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)")
_UPDATE = re.compile(r"UPDATE\s+(\w+)\s+(?:\w+\s+)?SET\s+(.*?)(?:\bFROM\b|\bWHERE\b|$)", re.S)
_SET = re.compile(r"(?:^|,)\s*(\w+)\s*=")


def _declared() -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for name in READ_MODELS:
        for table, columns in importlib.import_module(
            f"jetdbt.projections.{name}.tables"
        ).TABLES.items():
            assert table not in found, f"{table} declared twice"
            found[table] = columns
    return found


async def test_the_migrations_make_exactly_the_declared_columns(pg_url):
    declared = _declared()
    async with scratch_pool(pg_url) as pool:
        rows = await pool.fetch(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name <> 'schema_migrations'"
        )
    made: dict[str, set[str]] = {}
    for r in rows:
        made.setdefault(r["table_name"], set()).add(r["column_name"])
    assert {t: sorted(c) for t, c in made.items()} == {t: sorted(c) for t, c in declared.items()}
    assert {t for tables in TABLES.values() for t in tables} <= set(declared)


def _statements(module: str) -> list[str]:
    path = ROOT / (module.replace("jetdbt.", "", 1).replace(".", "/") + ".py")
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_every_fold_statement_names_only_declared_columns():
    declared = _declared()
    wrong, seen = [], 0
    for name in READ_MODELS:
        for path in sorted((ROOT / "projections" / name).glob("*.py")):
            for text in _statements(f"jetdbt.projections.{name}.{path.stem}"):
                for table, columns in _INSERT.findall(text):
                    seen += 1
                    named = {c.strip() for c in columns.split(",")}
                    wrong += [f"{path.name}: {table}.{c}" for c in named - set(declared[table])]
                for table, assignments in _UPDATE.findall(text):
                    seen += 1
                    named = set(_SET.findall(assignments))
                    wrong += [f"{path.name}: {table}.{c}" for c in named - set(declared[table])]
    assert seen > 10, "no fold statement found: the pattern no longer reads them"
    assert wrong == []


def _holds_an_answer(kind) -> bool:
    if isinstance(kind, type) and issubclass(kind, Answer):
        return True
    return any(_holds_an_answer(k) for k in typing.get_args(kind))


def test_every_answer_field_is_a_column_a_nested_answer_or_computed():
    columns = {c for cs in _declared().values() for c in cs}
    wrong = []
    for name in READ_MODELS:
        module = importlib.import_module(f"jetdbt.projections.{name}.answers")
        computed = getattr(module, "COMPUTED", {})
        answers = [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Answer) and v.__module__ == module.__name__
        ]
        named = set()
        for answer in answers:
            hints = typing.get_type_hints(answer)
            for field in msgspec.structs.fields(answer):
                key = f"{answer.__name__}.{field.name}"
                named.add(key)
                if key in computed:
                    assert field.name not in columns, f"{key} is a column: not computed"
                elif field.name not in columns and not _holds_an_answer(hints[field.name]):
                    wrong.append(f"{module.__name__}: {key}")
        assert set(computed) <= named, f"COMPUTED names no field: {set(computed) - named}"
    assert wrong == [], "answer fields that are no column: add each to its module's COMPUTED"

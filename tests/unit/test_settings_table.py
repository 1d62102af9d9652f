"""Each setting declared once (shared/process/config.py's `DECLARED`), and the settings table in
docs/operations.md generated from that declaration: stale, or a variable the code reads that is
declared neither as a setting nor in `NOT_SETTINGS`, fails here. No server is started."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import msgspec
from jetdbt.shared.process import config

from tests.support.paths import ROOT

# Where the code that reads the environment lives (tests and benchmarks read their own knobs).
SOURCES = ("shared", "services", "projections", "tests", "bench", "setup.py")
_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")
_ENV = {"env", "environ", "environment"}
_WRITES = {"setenv", "delenv", "putenv", "unsetenv"}


def _terminal(node: ast.AST) -> str | None:
    """`os.environ` → environ, `env` → env, `self.environ` → environ."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _constants(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _env_get(node: ast.AST) -> bool:
    """`env.get(...)`, `os.environ.get(...)`, `os.getenv(...)` (also pop and setdefault)."""
    if not isinstance(node, ast.Call):
        return False
    name, func = _terminal(node.func), node.func
    receiver = _terminal(func.value) if isinstance(func, ast.Attribute) else None
    return name in ("get", "pop", "setdefault") and receiver in _ENV or name == "getenv"


def _readers(tree: ast.AST) -> set[str]:
    """The module's functions that read the environment under a name they are given
    (`def _ints(name, default): ... os.environ.get(name)`)."""
    return {
        fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        and any(_env_get(n) and n.args and isinstance(n.args[0], ast.Name) for n in ast.walk(fn))
    }


def _reads(tree: ast.AST) -> set[str]:
    """The variable names a module reads from an environment: `env.get("X")`,
    `os.environ["X"]`, `os.getenv("X")`, `"X" in os.environ`, and a helper handed the
    environment, named for it or reading it (`_int(env, "X", 4)`, `env_int("X", 3)`).
    Writes (`monkeypatch.setenv`, `env["X"] = ...`) are not reads."""
    found: set[str] = set()
    readers = _readers(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _terminal(node.func) or ""
            if _env_get(node):
                found.update(_constants(node.args[:1]))
            elif name in _WRITES:
                continue
            elif (
                "env" in name.lower()
                or name in readers
                or any(_terminal(a) in _ENV for a in node.args)
            ):
                found.update(c for c in _constants(node.args) if _NAME.match(c))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _terminal(node.value) in _ENV:
                found.update(_constants([node.slice]))
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(o, ast.In) for o in node.ops)
            and any(_terminal(c) in _ENV for c in node.comparators)
        ):
            found.update(_constants([node.left]))
    return {name for name in found if _NAME.match(name)}


def _files() -> list[Path]:
    bases = [ROOT / source for source in SOURCES]
    return [p for base in bases for p in ([base] if base.is_file() else sorted(base.rglob("*.py")))]


def _read_in_code() -> dict[str, set[str]]:
    """Each variable read anywhere in the sources, with the files that read it."""
    where: dict[str, set[str]] = {}
    for path in _files():
        for name in _reads(ast.parse(path.read_text(), str(path))):
            where.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return where


def _accounted(name: str) -> bool:
    declared = {s.name for s in config.DECLARED}
    return name in declared or any(fnmatch.fnmatchcase(name, p) for p in config.NOT_SETTINGS)


def test_every_variable_the_code_reads_is_declared():
    read = _read_in_code()
    # One of each way of reading: a dbt setting, the CLI's, a test's knob, a bench helper's.
    assert {"DBT_PACKAGE_HUB_URL", "NO_COLOR", "JETDBT_FUZZ_EXAMPLES", "JETDBT_SCALE_SIZES"} <= set(
        read
    )
    missing = {name: sorted(files) for name, files in read.items() if not _accounted(name)}
    assert not missing, (
        "read but declared nowhere (add each to shared/process/config.py's DECLARED,"
        " or to NOT_SETTINGS"
        f" with the reason): {missing}"
    )


def test_every_variable_listed_as_no_setting_is_named_in_the_code():
    """NOT_SETTINGS names only what the code names (some through a table of names, as pip's
    index settings): an entry the code never names is stale."""
    named = set()
    for path in _files():
        tree = ast.parse(path.read_text(), str(path))
        named.update(c for c in _constants(ast.walk(tree)) if _NAME.match(c))
    unused = [p for p in config.NOT_SETTINGS if not any(fnmatch.fnmatchcase(n, p) for n in named)]
    assert not unused, f"listed in NOT_SETTINGS but named nowhere: {unused}"


def test_each_setting_is_declared_once_and_fills_one_field():
    names = [s.name for s in config.DECLARED]
    assert len(names) == len(set(names)), "a setting declared twice"
    fields = [s.field for s in config.DECLARED if s.field is not None]
    assert len(fields) == len(set(fields)), "two settings fill one field"
    assert set(fields) == set(config.Settings.__struct_fields__)
    assert not set(names) & set(config.NOT_SETTINGS), "declared and also listed as no setting"


def test_the_structs_defaults_and_load_come_from_the_declaration():
    defaults = {f.name: f for f in msgspec.structs.fields(config.Settings)}
    loaded = config.load({})
    for setting in config.DECLARED:
        if setting.field is None:
            continue
        field = defaults[setting.field]
        if setting.required:
            assert field.required, setting.name
        else:
            assert field.default == getattr(loaded, setting.field), setting.name
    settings = config.load(
        {"MAX_CONCURRENT_RUNS": "7", "RUN_MEMORY": "512m", "JETDBT_WEBHOOK_HOSTS": "A.example"}
    )
    assert (settings.max_concurrent_runs, settings.run_memory) == (7, 512 << 20)
    assert settings.webhook_hosts == ("a.example",)
    assert {name for name, _, _ in config.STACK_SETTINGS} <= set(
        s.name for s in config.DECLARED if s.stack
    )


def test_the_settings_table_in_the_operators_manual_is_current():
    doc = ROOT / "docs" / "operations.md"
    text = doc.read_text()
    assert config.generated(text, "settings", config.settings_table()) == text, (
        "docs/operations.md's settings table is stale:"
        " `.venv/bin/python -m jetdbt.shared.process.config`"
        " writes it again"
    )
    for setting in config.DECLARED:
        assert f"| `{setting.name}` |" in text, setting.name

"""The README's "Using it", walked from a fresh copy of the repository: every command of its
first block run as written, in order, against the `jetdbt up` that block starts; a command
that fails (other than one the README says exits 1) or prints other than what the README's
second block shows fails the test.

The manuals in docs/ are walked the same way: every CLI command their blocks show, in the
order they show them, against one `jetdbt up` in a fresh copy (started with the settings a
doc's own `... jetdbt up` line sets) after the README's deploy of the example, which the
manuals build on. Every command the README and the manuals show also parses with the CLI's
own parser, checked without a stack."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from jetdbt.services.cli.parser import build_parser

from tests.support.helpers import JETDBT, copy_tracked
from tests.support.paths import ROOT
from tests.support.up import Up

PROGRAM = ".venv/bin/jetdbt"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# A command and its comment: two spaces or more before the `#` that starts the comment.
_LINE = re.compile(r"^(?P<command>\S.*?)\s{2,}#\s*(?P<comment>.*)$")
# `NAME=value` before a command: a setting it runs with.
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_RUNS_THE_CLI = re.compile(rf"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*{re.escape(PROGRAM)}(?:\s|$)")


def _section(readme: str, title: str) -> str:
    start = readme.index(f"\n## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end > 0 else None]


def _blocks(section: str) -> list[list[str]]:
    return [block.strip("\n").splitlines() for block in section.split("```")[1::2]]


def _commands(block: list[str]) -> list[tuple[str, str]]:
    """(command, comment) for each line of the block."""
    found = []
    for line in block:
        match = _LINE.match(line)
        found.append((match["command"], match["comment"]) if match else (line.strip(), ""))
    return found


def _shown(block: list[str]) -> dict[str, list[str]]:
    """The transcript: each `$ command` and the lines the README shows it printing."""
    shown: dict[str, list[str]] = {}
    current = None
    for line in block:
        if line.startswith("$ "):
            current = line[2:]
            shown[current] = []
        elif current is not None:
            shown[current].append(line)
    return shown


def _pattern(line: str, run_id: str) -> re.Pattern:
    """A shown line as a pattern: spaces are any run of them, `…` anything."""
    words = " ".join(line.replace("RUN_ID", run_id).split())
    parts = [re.escape(part) for part in words.split("…")]
    return re.compile("^" + ".*".join(parts).replace(r"\ ", r"\s+") + "$")


def _prints(shown: list[str], output: str, run_id: str) -> str | None:
    """Why `output` is not what the README shows (its lines, in order, among the output's)."""
    lines = iter(" ".join(line.split()) for line in output.splitlines())
    for want in shown:
        pattern = _pattern(want, run_id)
        if not any(pattern.match(line) for line in lines):
            return f"no line like {want!r}"
    return None


def _fresh_copy(dest: Path) -> None:
    """What a clone holds (tracked files, the README's examples), and the venv `make`
    would make, linked."""
    copy_tracked(ROOT, dest)
    (dest / ".venv").symlink_to(Path(JETDBT).parent.parent)


@pytest.mark.dbt
def test_the_readme_using_it_runs_as_written(tmp_path, pg_url):
    section = _section((ROOT / "README.md").read_text(), "Using it")
    block, transcript = _blocks(section)[:2]
    commands = _commands(block)
    shown = _shown(transcript)
    assert commands[0][0] == f"{PROGRAM} up", commands[0]
    assert set(shown) <= {command for command, _ in commands}, "the README shows a command"
    clone = tmp_path / "clone"
    _fresh_copy(clone)
    up = Up(clone, tmp_path / "stacks", pg_url)
    run_id = ""
    failures = []
    try:
        for command, comment in commands[1:]:
            argv = shlex.split(command.replace("RUN_ID", run_id))
            assert argv[0] == PROGRAM, command
            done = up.cli(*argv[1:], cwd=clone, timeout=600)
            wanted = 1 if "exits 1" in comment or comment.endswith(": 1") else 0
            if done.returncode != wanted:
                failures.append(f"{command}: exit {done.returncode}, not {wanted}\n{done.stderr}")
            if command in shown and (why := _prints(shown[command], done.stdout, run_id)):
                failures.append(f"{command}: {why}; it printed:\n{done.stdout}")
            if argv[1] == "run":
                run_id = _run_id(done.stdout) or run_id
    finally:
        up.stop()
    assert not failures, "\n\n".join(failures)


def _shown_commands(text: str) -> list[tuple[str, str]]:
    """(command, comment) of each line of a block that runs the CLI, a `\\` continuation
    joined, settings before it (`NAME=value`) kept; other lines (a shell's, `nats pub`) left
    out."""
    found = []
    for block in _blocks(text):
        joined = "\n".join(block).replace("\\\n", " ").splitlines()
        found += [(c, why) for c, why in _commands(joined) if _RUNS_THE_CLI.match(c)]
    return found


def _argv(command: str) -> tuple[dict[str, str], list[str]]:
    """A shown command's settings and its arguments after the program."""
    words = shlex.split(command)
    settings = dict(w.split("=", 1) for w in words if _ASSIGNMENT.match(w))
    return settings, words[len(settings) + 1 :]


def test_every_command_the_readme_and_the_docs_show_parses():
    """Each CLI command shown anywhere names a command and options the CLI has."""
    parser = build_parser()
    shown = {path.name: _shown_commands(path.read_text()) for path in [ROOT / "README.md", *DOCS]}
    assert len(shown["guide.md"]) > 30 and shown["security.md"], shown
    wrong = []
    for name, commands in shown.items():
        for command, _ in commands:
            try:
                parser.parse_args(_argv(command)[1])
            except SystemExit:
                wrong.append(f"{name}: {command}")
    assert not wrong, "shown, but the CLI refuses them:\n" + "\n".join(wrong)


@pytest.mark.dbt
def test_the_docs_commands_run_as_written(tmp_path, pg_url, monkeypatch):
    shown = [(path.name, *line) for path in DOCS for line in _shown_commands(path.read_text())]
    # A doc's own `jetdbt up` says the settings the stack runs with (the one stack here).
    for _, command, _ in shown:
        settings, argv = _argv(command)
        if argv == ["up"]:
            for name, value in settings.items():
                monkeypatch.setenv(name, value)
    readme = _commands(_blocks(_section((ROOT / "README.md").read_text(), "Using it"))[0])
    deploy = next(command for command, _ in readme if _argv(command)[1][0] == "deploy")
    clone = tmp_path / "clone"
    _fresh_copy(clone)
    up = Up(clone, tmp_path / "stacks", pg_url)
    postgres = {"DATABASE_URL": pg_url, "JETDBT_SCHEMA": _schema(up.proc.pid)}
    found = {"RUN_ID": "", "TOKEN_ID": ""}
    failures = []
    try:
        for doc, command, comment in [("README.md", deploy, ""), *shown]:
            settings, argv = _argv(command)
            if argv == ["up"] or settings:
                continue  # the stack is up already; a setting names another stack
            for name, value in found.items():
                argv = [word.replace(name, value) for word in argv]
            env = up.env()
            if argv[0] == "replay" or argv[:2] == ["dead-letters", "retry"]:
                env |= postgres  # on Postgres directly: the guide says to name a configured one
            done = up.cli(*argv, cwd=clone, timeout=600, env=env)
            wanted = 1 if "exits 1" in comment or comment.endswith(": 1") else 0
            if done.returncode != wanted:
                failures.append(
                    f"{doc}: {command}: exit {done.returncode}, not {wanted}\n{done.stderr}"
                )
            if argv[0] in ("run", "retry") or argv[:2] == ["job", "run"]:
                found["RUN_ID"] = _run_id(done.stdout) or found["RUN_ID"]
            if argv[:2] == ["token", "create"] and (
                token := re.search(r"jdbt_(\w+?)_", done.stdout)
            ):
                found["TOKEN_ID"] = token[1]
    finally:
        up.stop()
    assert not failures, "\n\n".join(failures)


def _run_id(output: str) -> str | None:
    """The run a command printed: `run id: …`, or the JSON result's."""
    for line in output.splitlines():
        if line.startswith("run id: "):
            return line.removeprefix("run id: ").strip()
    try:
        return json.loads(output)["run_id"]
    except (ValueError, KeyError, TypeError):
        return None


def _schema(pid: int) -> str:
    """The projections' schema the `jetdbt up` with this pid was started with."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(
        v[len(b"JETDBT_SCHEMA=") :].decode() for v in environ if v.startswith(b"JETDBT_SCHEMA=")
    )

"""The README's "Using it", walked from a fresh copy of the repository: every command of its
first block run as written, in order, against the `jetdbt up` that block starts; a command
that fails (other than one the README says exits 1) or prints other than what the README's
second block shows fails the test."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.support.helpers import JETDBT, copy_tracked
from tests.support.paths import ROOT
from tests.support.up import Up

pytestmark = pytest.mark.dbt

PROGRAM = ".venv/bin/jetdbt"
# A command and its comment: two spaces or more before the `#` that starts the comment.
_LINE = re.compile(r"^(?P<command>\S.*?)\s{2,}#\s*(?P<comment>.*)$")


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


def _run_id(output: str) -> str | None:
    """The run a command printed: `run id: …`, or the JSON result's."""
    for line in output.splitlines():
        if line.startswith("run id: "):
            return line.removeprefix("run id: ").strip()
    try:
        return json.loads(output)["run_id"]
    except (ValueError, KeyError, TypeError):
        return None

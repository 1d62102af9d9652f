"""The runner handles every command verb a subject may carry, and no other: its dispatch
table and subjects.COMMAND_VERBS (which the permissions and the refusal name) agree."""

from __future__ import annotations

from types import SimpleNamespace

from jetdbt.services.runner.worker import Runner
from jetdbt.shared.bus import subjects
from jetdbt.shared.process.config import load


def test_the_runner_has_a_handler_for_each_command_verb():
    ctx = SimpleNamespace(name="t", settings=load({}), bus=None)
    assert sorted(Runner(ctx).handlers) == sorted(subjects.COMMAND_VERBS)

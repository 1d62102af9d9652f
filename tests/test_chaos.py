"""The chaos suite, a few of each (`python -m tests.chaos --quick`): in every experiment
each run started passes, and the columns that must be zero are. `make chaos` runs the
full counts."""

from __future__ import annotations

import asyncio

import pytest

from tests.chaos.suite import QUICK, render, run_suite

# The fixture runs every experiment once (about two minutes alone) before the first check.
pytestmark = [pytest.mark.dbt, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    tallies = asyncio.run(run_suite(tmp_path_factory.mktemp("chaos"), quick=True))
    print(render(tallies))
    return tallies


@pytest.mark.parametrize("experiment", QUICK)
def test_nothing_goes_wrong(table, experiment):
    tally = next(t for t in table if t.key == experiment)
    assert tally.started == tally.passed > 0, render(table)
    assert not tally.violations(), render(table)

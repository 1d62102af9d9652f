"""The chaos suite, a few of each (`python -m tests.support.chaos --quick`): in every experiment
each run started passes, and the columns that must be zero are. `make chaos` runs the
full counts. One test, so the suite runs once however xdist spreads the tests."""

from __future__ import annotations

import pytest

from tests.support.chaos.suite import render, run_suite

# Every experiment once: about two and a half minutes on an idle machine.
pytestmark = [pytest.mark.dbt, pytest.mark.timeout(900)]


async def test_nothing_goes_wrong(tmp_path):
    tallies = await run_suite(tmp_path, quick=True)
    table = render(tallies)
    print(table)
    for t in tallies:
        assert t.started == t.passed > 0, table
        assert not t.violations(), table

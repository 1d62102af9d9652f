"""The chaos suite, each experiment once (`python -m tests.support.chaos --quick`): in every
experiment each run started passes, and the columns that must be zero are. `make chaos`
runs the full counts through the same harness. One test per experiment, so xdist spreads
them over its workers."""

from __future__ import annotations

import pytest

from tests.support.chaos.suite import QUICK, render, run_suite

pytestmark = [pytest.mark.dbt, pytest.mark.timeout(600)]


@pytest.mark.parametrize("experiment", list(QUICK))
async def test_nothing_goes_wrong(tmp_path, experiment):
    tallies = await run_suite(tmp_path, quick=True, only={experiment})
    table = render(tallies)
    print(table)
    for t in tallies:
        assert t.started == t.passed > 0, table
        assert not t.violations(), table

"""The chaos suite, a few of each (`python -m tests.chaos --quick`): in every experiment
each run started passes, and the columns that must be zero are. `make chaos` runs the
full counts. One test, so the suite runs once however xdist spreads the tests."""

from __future__ import annotations

import pytest

from tests.chaos.suite import render, run_suite

# Every experiment once: about two and a half minutes on an idle machine.
pytestmark = [pytest.mark.dbt, pytest.mark.timeout(900)]

# With synchronous_commit off (projections/migrate.py), a Postgres crash can lose a batch
# a projector committed and acked; the projector never folds it again (issue #13 report).
KNOWN = {"postgres": "a Postgres crash loses a committed batch the projector does not fold again"}


async def test_nothing_goes_wrong(tmp_path):
    tallies = await run_suite(tmp_path, quick=True)
    table = render(tallies)
    print(table)
    wrong = {t.key: t.violations() for t in tallies if t.violations() or t.started != t.passed}
    assert all(t.started for t in tallies), table
    assert not set(wrong) - set(KNOWN), table
    if wrong:
        pytest.xfail("; ".join(KNOWN[k] for k in wrong))

"""What a data team reads in the terminal every day (issue 41), the console script against
one real stack and real dbt: a failed node's cause in a CI log, a deploy's error without
dbt's deprecation summary, and schedules checked before anything is saved."""

from __future__ import annotations

import shutil
import zoneinfo
from datetime import UTC, datetime

import pytest
import pytest_asyncio

from tests.support.helpers import jetdbt
from tests.support.paths import EXAMPLE
from tests.support.shared_stack import shared_stack

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

P = "daily"
# Deprecated (a generic test's arguments not under `arguments`), and failing to parse.
DEPRECATED_YML = """
models:
  - name: nope
    columns:
      - name: x
        data_tests:
          - accepted_values:
              values: [1]
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory, pg_url, environments_cache):
    async with shared_stack(tmp_path_factory.mktemp("stack"), pg_url, environments_cache) as st:
        yield st


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployed(stack, tmp_path_factory):
    """The example project with a model that fails on a value dbt cannot convert."""
    folder = tmp_path_factory.mktemp("project") / "shop"
    shutil.copytree(EXAMPLE, folder)
    (folder / "models" / "broken.sql").write_text(
        "{{ config(materialized='table') }}\nselect cast('abc' as int) as x\n"
    )
    done = await jetdbt(stack, "deploy", str(folder), "--project", P)
    assert done.returncode == 0, done.stderr
    return folder


async def test_a_failed_node_s_cause_reaches_a_ci_log(stack, deployed):
    done = await jetdbt(stack, "run", P, "-s", "broken")
    assert done.returncode == 1
    assert "Runtime Error in model broken" in done.stdout, done.stdout
    assert "Could not convert string 'abc' to INT32" in done.stdout, done.stdout
    run_id = done.stdout.rsplit("run id: ", 1)[1].strip()
    status = await jetdbt(stack, "status", run_id)
    assert "Could not convert string 'abc' to INT32" in status.stdout, status.stdout


async def test_a_deploy_error_leaves_out_dbt_s_deprecation_summary(stack, deployed):
    (deployed / "models" / "nope.sql").write_text("select * from {{ ref('missing') }}\n")
    (deployed / "models" / "nope.yml").write_text(DEPRECATED_YML)
    try:
        done = await jetdbt(stack, "deploy", str(deployed), "--project", P)
    finally:
        (deployed / "models" / "nope.sql").unlink()
        (deployed / "models" / "nope.yml").unlink()
    assert done.returncode == 1
    assert "depends on a node named 'missing' which was not found" in done.stderr, done.stderr
    assert "Deprecat" not in done.stderr, done.stderr


async def test_a_schedule_is_checked_before_its_job_is_saved(stack, deployed):
    five = await jetdbt(stack, "schedule", "add", "early", "--project", P, "--cron", "0 6 * * *")
    assert five.returncode == 3
    assert "seconds first" in five.stderr and "`0 0 6 * * *`" in five.stderr, five.stderr
    zone = ("--cron", "0 0 6 * * *", "--tz", "Mars/Olympus", "--command", "seed")
    away = await jetdbt(stack, "schedule", "add", "early", "--project", P, *zone)
    assert away.returncode == 3 and "not a time zone name" in away.stderr, away.stderr
    listed = await jetdbt(stack, "job", "list", "--project", P)
    assert "early" not in listed.stdout, listed.stdout  # nothing was saved

    # `--command build` is a command given: the job is saved with it, and scheduled.
    cron = ("--cron", "0 0 6 * * MON-FRI", "--tz", "Europe/Paris", "--command", "build")
    added = await jetdbt(stack, "schedule", "add", "early", "--project", P, *cron)
    assert added.returncode == 0, added.stderr
    assert "job early: saved" in added.stdout, added.stdout
    # Its next fire is shown before it ever fired: a weekday, 06:00 in Paris.
    listed = await jetdbt(stack, "schedule", "list", "--project", P)
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("early")]
    fires = datetime.fromisoformat(row.split()[-1])
    assert fires > datetime.now(UTC), row
    local = fires.astimezone(zoneinfo.ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (6, 0) and local.isoweekday() <= 5, row

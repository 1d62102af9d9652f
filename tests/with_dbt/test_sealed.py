"""A sealed dbt process: a project's files are never imported by dbt, dbt never sees the
runner's credentials, and every job has its own HOME and TMPDIR."""

from __future__ import annotations

import duckdb
import pytest
from jetdbt.services.cli import client
from jetdbt.services.runner.process import spawn
from jetdbt.services.runner.setup.workspace import job_root
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.helpers import deploy_and_wait

pytestmark = pytest.mark.dbt

ENVIRON_PROBE = """
{{ config(materialized="table") }}
select replace(content, chr(0), ' ') as env from read_text('/proc/self/environ')
"""
PROBE = """
select
  '{{ env_var("NATS_URL", "absent") }}' as nats_url,
  '{{ env_var("DATABASE_URL", "absent") }}' as database_url,
  '{{ env_var("JETDBT_RUNNER_TOKEN", "absent") }}' as runner_token,
  '{{ env_var("DBT_EMPTY", "absent") }}' as dbt_empty,
  '{{ env_var("HOME", "") }}' as home,
  '{{ env_var("TMPDIR", "") }}' as tmpdir
"""


async def test_dbt_never_imports_the_project_or_sees_the_runner_environment(
    stack, project_copy, tmp_path, monkeypatch
):
    marker = tmp_path / "imported"
    # A module named like one dbt imports: it must never run, at deploy or at build.
    (project_copy / "click.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (project_copy / "models" / "env_probe.sql").write_text(PROBE)
    (project_copy / "models" / "environ_probe.sql").write_text(ENVIRON_PROBE)
    # dbt reads DBT_EMPTY as --empty: a flag no argument list would show.
    (project_copy / "jetdbt.yaml").write_text("env:\n  DBT_EMPTY: 'true'\n")
    # The runner's own settings and credentials, as a production runner has them.
    monkeypatch.setenv("NATS_URL", stack.nats_url)
    monkeypatch.setenv("DATABASE_URL", stack.database_url)
    monkeypatch.setenv("JETDBT_RUNNER_TOKEN", "runner-only-credential")
    if spawn._server is not None:  # a fresh warm dbt, started from this environment
        spawn._server.stop()
        spawn._server = None

    await deploy_and_wait(stack.bus, project_copy, "sealed")
    probes = BuildCommand(select=["env_probe", "environ_probe"])
    final = await client.run(stack.bus, "sealed", RunCommand(command=probes, run_id="s1"))
    assert final.result.status == "passed", final.result.error

    assert not marker.exists(), "a project file was imported inside dbt's process"
    con = duckdb.connect(str(stack.settings.default_duckdb), read_only=True)
    try:
        row = con.execute(
            "SELECT nats_url, database_url, runner_token, dbt_empty, home, tmpdir"
            " FROM sealed.env_probe"
        ).fetchone()
        environ = con.execute("SELECT env FROM sealed.environ_probe").fetchone()[0]
    finally:
        con.close()
    nats_url, database_url, token, dbt_empty, home, tmpdir = row
    assert dbt_empty == "absent"  # a project's env never sets one of dbt's flags
    # What the process started with too, not only what Python shows.
    assert "runner-only-credential" not in environ and "NATS_URL" not in environ
    assert "DATABASE_URL" not in environ
    assert (nats_url, database_url, token) == ("absent", "absent", "absent")
    job = job_root(stack.settings.runner_cache, "s1.1")
    assert home.startswith(str(job)) and tmpdir.startswith(str(job))
    assert home != tmpdir

"""The first hour's wrong answers (issue 27), each reproduced as a user meets it: the
console script against a real stack, real dbt, and what the CLI, the API and the log say."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid

import msgspec
import pytest
import yaml

from services.stack import Stack
from shared import subjects
from tests.gate import GATE, add_gate, until_gate_runs
from tests.helpers import JETDBT, cli_env, get_json, jetdbt, pg_parts, wait_for

pytestmark = pytest.mark.dbt


async def _started(stack, *args: str) -> asyncio.subprocess.Process:
    """The console script started in the background, its output piped (plain lines)."""
    return await asyncio.create_subprocess_exec(
        JETDBT,
        *args,
        env={**cli_env(stack), "NO_COLOR": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _run_record(stack, run_id: str, status: str) -> dict:
    async def ended():
        code, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}")
        return body if code == 200 and body["status"] == status else None

    return await wait_for(ended, timeout=60)


async def test_cancel_of_a_running_build_records_what_it_finished(stack, project_copy, tmp_path):
    """`jetdbt cancel` mid-build: the nodes dbt finished stand, the one it was building ends
    `cancelled`, the totals count them in the CLI, the API and the run's event, and the CLI
    never calls it an empty selection."""
    add_gate(project_copy, tmp_path / "never-released")
    assert (await jetdbt(stack, "deploy", str(project_copy))).returncode == 0
    run = await _started(stack, "run", "jaffle_shop", "--watch", "--run-id", "cx1")
    await until_gate_runs(stack.api_url, "cx1")
    # A second build of the same warehouse waits for it; cancelled there, it never ran a node.
    queued = await _started(stack, "run", "jaffle_shop", "--run-id", "cx2")
    await _run_record(stack, "cx2", "queued")
    assert (await jetdbt(stack, "cancel", "cx2")).returncode == 0
    out, _ = (s.decode() for s in await asyncio.wait_for(queued.communicate(), 60))
    assert "matched no nodes" not in out and "cancelled before any node ran" in out, out
    cancelled = await jetdbt(stack, "cancel", "cx1")
    assert cancelled.returncode == 0, cancelled.stderr
    out, err = (s.decode() for s in await asyncio.wait_for(run.communicate(), 60))
    assert run.returncode != 0
    assert "matched no nodes" not in out and "no nodes" not in out, out
    totals = next(line for line in out.splitlines() if line.startswith("CANCELLED:"))
    assert "passed=" in totals, out
    assert f"cancelled  {'model':<9} gate" in out or "cancelled" in out.split("CANCELLED:")[0]

    body = await _run_record(stack, "cx1", "cancelled")
    nodes = {n["unique_id"]: n for n in body["nodes"]}
    assert not [u for u, n in nodes.items() if n["status"] == "running"], nodes
    assert nodes[GATE]["status"] == "cancelled"
    finished = [n for n in nodes.values() if n["outcome"] == "passed"]
    assert finished and body["totals"]["passed"] == len(finished)
    assert body["result"]["totals"] == body["totals"]
    assert sum(body["totals"].values()) == len(nodes)
    assert body["nodes_finished"] == len(nodes)


async def test_retry_says_which_version_and_refuses_an_old_one(stack, project_copy):
    """Fix the SQL, deploy again, `jetdbt retry RUN`: the retry would resume the failed run's
    version (its identity), so it is refused naming both versions; `--old-version` resumes
    the old one on purpose, and says which version it resumes."""
    broken = project_copy / "models" / "broken.sql"
    broken.write_text("select * from no_such_relation")
    first = await jetdbt(stack, "deploy", str(project_copy))
    assert first.returncode == 0, first.stderr
    failed = await jetdbt(stack, "run", "jaffle_shop", "--run-id", "rv1", "--json")
    assert json.loads(failed.stdout)["status"] == "failed"
    broken.write_text("select 1 as fixed")
    second = await jetdbt(stack, "deploy", str(project_copy))
    assert second.returncode == 0, second.stderr
    old, new = (line.split(" version ")[1].split()[0] for line in (first.stdout, second.stdout))

    refused = await jetdbt(stack, "retry", "rv1")
    assert refused.returncode != 0
    assert f"run 'rv1' built version {old}" in refused.stderr, refused.stderr
    assert f"now at version {new}" in refused.stderr and "--old-version" in refused.stderr

    resumed = await jetdbt(stack, "retry", "rv1", "--old-version", "--json")
    assert f"retry of run rv1 resumes version {old}" in resumed.stderr, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["command"] == "retry" and result["status"] == "failed"
    nodes = {n["name"]: n for n in result["nodes"]}
    assert nodes["broken"]["outcome"] == "failed"  # the old files, as asked
    assert "orders" not in nodes  # only what failed or was skipped, not the whole build


async def test_a_failure_before_the_first_node_reports_dbt_s_error(
    settings, tmp_path, project_copy, pg_url
):
    """A Postgres warehouse whose database does not exist: the deploy parses (no connection),
    the run fails before any node, and the CLI, the API and the run's event say why in
    dbt's own words, never as an empty selection."""
    missing = f"no_db_{uuid.uuid4().hex[:8]}"
    warehouse = {"type": "postgres", **pg_parts(pg_url), "dbname": missing, "schema": "s"}
    file = tmp_path / "warehouses.yaml"
    file.write_text(yaml.safe_dump({"warehouses": {"pg": warehouse}}))
    (project_copy / "jetdbt.yaml").write_text("profile:\n  warehouse: pg\n")
    stack = await Stack(msgspec.structs.replace(settings, warehouses_file=file)).start()
    try:
        assert (await jetdbt(stack, "deploy", str(project_copy))).returncode == 0
        ran = await jetdbt(stack, "run", "jaffle_shop", "--run-id", "pg1")
        said = f'database "{missing}" does not exist'
        assert ran.returncode != 0
        assert "matched no nodes" not in ran.stdout, ran.stdout
        assert said in ran.stdout and "failed before any node ran" in ran.stdout, ran.stdout
        body = await _run_record(stack, "pg1", "failed")
        assert said in body["result"]["error"], body["result"]["error"]
        final = await stack.bus.last_event(subjects.run_event("jaffle_shop", "pg1", "finished"))
        assert said in final.result.error
    finally:
        await stack.stop()


async def test_refusals_and_a_failed_parse_leave_nothing_in_the_project_list(
    stack, project_copy, tmp_path
):
    """`run jaffle_shp` (misspelled), a refused deploy and a failed `parse` of a folder never
    deployed leave no project behind, and a parse is never a project's last run."""
    assert (await jetdbt(stack, "deploy", str(project_copy))).returncode == 0
    built = await jetdbt(stack, "run", "jaffle_shop", "--run-id", "lp1", "-s", "raw_orders")
    assert built.returncode == 0, built.stdout + built.stderr
    misspelled = await jetdbt(stack, "run", "jaffle_shp")
    assert misspelled.returncode != 0 and "has no deployed version" in misspelled.stderr
    bad = tmp_path / "bad"
    shutil.copytree(project_copy, bad)
    (bad / "jetdbt.yaml").write_text("no_such_key: 1\n")
    refused = await jetdbt(stack, "deploy", str(bad), "--project", "bad_descriptor")
    assert refused.returncode != 0 and "no_such_key" in refused.stderr, refused.stderr
    (project_copy / "models" / "broken.sql").write_text("select * from {{ ref('nope') }}")
    for name in ("jaffle_shop", "never_deployed"):
        parsed = await jetdbt(stack, "parse", str(project_copy), "--project", name)
        assert parsed.returncode != 0, parsed.stdout

    async def listed():
        code, body = await get_json(f"{stack.api_url}/v1/projects")
        runs = await get_json(f"{stack.api_url}/v1/projects/never_deployed/runs")
        return body["projects"] if code == 200 and runs[1].get("runs") else None

    projects = await wait_for(listed, timeout=60)
    assert [p["project"] for p in projects] == ["jaffle_shop"], projects
    assert (projects[0]["last_run_id"], projects[0]["last_run_status"]) == ("lp1", "passed")

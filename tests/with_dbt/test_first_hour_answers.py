"""The first hour's wrong answers (issue 27), each reproduced as a user meets it: the
console script against a real stack, real dbt, and what the CLI, the API and the log say."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import duckdb
import msgspec
import pytest
import yaml
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import subjects

from tests.support.gate import GATE, add_gate, until_gate_runs
from tests.support.helpers import (
    JETDBT,
    cli_env,
    deploy_and_wait,
    get_json,
    jetdbt,
    pg_parts,
    wait_for,
)

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
    `cancelled`, the one after it that dbt never reached is listed `not run` (skipped), the
    totals count them all in the CLI, the API and the run's event, and the CLI never calls
    it an empty selection."""
    add_gate(project_copy, tmp_path / "never-released")
    (project_copy / "models" / "marts" / "after_gate.sql").write_text(
        "select * from {{ ref('gate') }}"
    )
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
    totals = next((line for line in out.splitlines() if line.startswith("CANCELLED by ")), "")
    assert "passed=" in totals and "skipped=1" in totals and "unknown=1" in totals, out
    assert re.search(r"^unknown\s+cancelled\s+model\s+gate\s*$", out, re.M), out
    assert re.search(r"^skipped\s+not run\s+model\s+after_gate\s*$", out, re.M), out

    body = await _run_record(stack, "cx1", "cancelled")
    nodes = {n["unique_id"]: n for n in body["nodes"]}
    assert not [u for u, n in nodes.items() if n["status"] == "running"], nodes
    gate, after = nodes[GATE], nodes["model.jaffle_shop.after_gate"]
    assert (gate["status"], gate["outcome"]) == ("cancelled", "unknown"), gate
    assert gate["message"].endswith("while dbt was running it"), gate
    assert (after["status"], after["outcome"]) == ("not run", "skipped"), after
    assert after["message"].startswith("not run: the run was cancelled by "), after
    assert after["message"].endswith(" before dbt reached it") and not after["started_at"]
    assert body["totals"]["skipped"] == 1 and body["totals"]["unknown"] == 1, body["totals"]
    shown = (await jetdbt(stack, "status", "cx1")).stdout
    assert " 1 skipped, 1 unknown, " in shown.splitlines()[0], shown
    assert re.search(r"^skipped\s+not run\s+model\s+after_gate$", shown, re.M), shown
    assert re.search(r"^unknown\s+cancelled\s+model\s+gate$", shown, re.M), shown
    finished = [n for n in nodes.values() if n["outcome"] == "passed"]
    assert finished and body["totals"]["passed"] == len(finished)
    assert body["result"]["totals"] == body["totals"]
    assert sum(body["totals"].values()) == len(nodes)
    assert body["nodes_finished"] == len(nodes)

    # A selected build lists only what its selection resolved to, never the whole project.
    selected = await _started(stack, "run", "jaffle_shop", "-s", "gate+", "--run-id", "cx3")
    await until_gate_runs(stack.api_url, "cx3")
    assert (await jetdbt(stack, "cancel", "cx3")).returncode == 0
    await asyncio.wait_for(selected.communicate(), 60)
    body = await _run_record(stack, "cx3", "cancelled")
    nodes = {n["unique_id"]: (n["status"], n["outcome"]) for n in body["nodes"]}
    assert nodes == {GATE: ("cancelled", "unknown"), after["unique_id"]: ("not run", "skipped")}
    assert body["totals"]["skipped"] == body["totals"]["unknown"] == 1, body["totals"]


async def test_retry_says_which_version_and_refuses_an_old_one(stack, project_copy):
    """Fix the SQL, deploy again, `jetdbt retry RUN`: the retry would resume the failed run's
    version (its identity), so it is refused naming both versions; `--old-version` resumes
    the old one on purpose, and says which version it resumes."""
    broken = project_copy / "models" / "broken.sql"
    broken.write_text("select * from no_such_relation")
    first = await jetdbt(stack, "deploy", str(project_copy))
    failed = await jetdbt(stack, "run", "jaffle_shop", "--run-id", "rv1", "--json")
    assert json.loads(failed.stdout)["status"] == "failed"
    broken.write_text("select 1 as fixed")
    second = await jetdbt(stack, "deploy", str(project_copy))
    old, new = _version(first), _version(second)

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
    logged = await jetdbt(stack, "logs", result["run_id"])
    assert f"jetdbt: resuming run rv1 at version {old}" in logged.stdout, logged.stdout


async def test_a_failure_before_the_first_node_reports_dbt_s_error(
    settings, tmp_path, project_copy, warehouse_pg_url
):
    """A Postgres warehouse whose database does not exist: the deploy parses (no connection),
    the run fails before any node, and the CLI, the API and the run's event say why in
    dbt's own words, never as an empty selection."""
    missing = f"no_db_{uuid.uuid4().hex[:8]}"
    warehouse = {"type": "postgres", **pg_parts(warehouse_pg_url), "dbname": missing, "schema": "s"}
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
    bad = tmp_path / "bad"
    shutil.copytree(project_copy, bad)
    (bad / "jetdbt.yaml").write_text("no_such_key: 1\n")
    (project_copy / "models" / "broken.sql").write_text("select * from {{ ref('nope') }}")
    # At once: none of them waits for another.
    misspelled, refused, *parsed = await asyncio.gather(
        jetdbt(stack, "run", "jaffle_shp"),
        jetdbt(stack, "deploy", str(bad), "--project", "bad_descriptor"),
        *(jetdbt(stack, "parse", str(project_copy), "--project", name)
          for name in ("jaffle_shop", "never_deployed")),
    )  # fmt: skip
    assert misspelled.returncode != 0 and "has no deployed version" in misspelled.stderr
    assert refused.returncode != 0 and "no_such_key" in refused.stderr, refused.stderr
    for done in parsed:
        assert done.returncode != 0, done.stdout

    async def listed():
        code, body = await get_json(f"{stack.api_url}/v1/projects")
        runs = await get_json(f"{stack.api_url}/v1/projects/never_deployed/runs")
        return body["projects"] if code == 200 and runs[1].get("runs") else None

    projects = await wait_for(listed, timeout=60)
    assert [p["project"] for p in projects] == ["jaffle_shop"], projects
    assert (projects[0]["last_run_id"], projects[0]["last_run_status"]) == ("lp1", "passed")


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )


def _version(deployed: subprocess.CompletedProcess) -> str:
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    said = next(line for line in deployed.stdout.splitlines() if line.startswith("deployed "))
    return said.split(" version ")[1].split()[0]


async def test_a_deploy_of_another_folder_under_a_taken_name_needs_a_flag(
    stack, project_copy, tmp_path
):
    """The public jaffle shop is also named jaffle_shop: deployed over the example, it is
    refused naming both folders unless --replace-source; a re-deploy from the same folder
    or from a clone of it is not."""
    repo = tmp_path / "shop"
    shutil.copytree(project_copy, repo)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "the shop")
    first = _version(await jetdbt(stack, "deploy", str(repo)))
    (repo / "models" / "extra.sql").write_text("select 1 as x")
    again = _version(await jetdbt(stack, "deploy", str(repo)))  # the same folder, changed
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(repo), str(clone))
    (clone / "models" / "cloned.sql").write_text("select 2 as x")
    cloned = _version(await jetdbt(stack, "deploy", str(clone)))
    assert len({first, again, cloned}) == 3

    other = await jetdbt(stack, "deploy", str(project_copy))  # same name, another folder
    assert other.returncode != 0
    assert "project 'jaffle_shop'" in other.stderr and "another folder" in other.stderr
    assert "--replace-source" in other.stderr, other.stderr
    latest = await stack.bus.last_event(subjects.deploy_event("jaffle_shop", "deployed"))
    assert latest.version.startswith(cloned)
    replaced = _version(await jetdbt(stack, "deploy", str(project_copy), "--replace-source"))
    latest = await stack.bus.last_event(subjects.deploy_event("jaffle_shop", "deployed"))
    assert latest.version.startswith(replaced)

    async def recorded():
        code, body = await get_json(f"{stack.api_url}/v1/projects/jaffle_shop/deploys")
        deploys = body.get("deploys", [])
        found = [d["source"] for d in deploys if d["deploy_id"] == latest.deploy_id]
        return found if found and found[0] else None

    [source] = await wait_for(recorded)
    assert source[0].startswith("folder "), source  # the folder's mark, never its path
    assert str(project_copy) not in json.dumps(source)
    # A system that publishes a deploy naming no source is not held to one.
    await deploy_and_wait(stack.bus, repo, "jaffle_shop")


async def test_an_older_deploy_that_finishes_last_never_becomes_current(
    settings, project_copy, tmp_path
):
    """Two deploys of one project in flight: the first one's runner holds its command (as a
    slow or dying runner does) while the second deploys; when the first ends last, the
    current version and the latest graph stay the second's."""
    reader = await Stack(settings, runner=False).start()
    runner = None
    try:
        held = await reader.bus.js.pull_subscribe_bind("runners", stream="DBT_COMMANDS")
        older = await _started(reader, "deploy", str(project_copy))
        first = (await held.fetch(1, timeout=60))[0]
        runner_settings = msgspec.structs.replace(
            settings, home=tmp_path / "runner", runner_name="runner-2"
        )
        runner = await Stack(runner_settings, projectors=False, api=False).start()
        (project_copy / "models" / "newer.sql").write_text("select 1 as x")
        newer = _version(await jetdbt(reader, "deploy", str(project_copy)))
        await first.nak()  # the held command comes back, and now ends last
        out, err = (s.decode() for s in await asyncio.wait_for(older.communicate(), 120))
        assert older.returncode != 0 and "superseded" in err, out + err

        latest = await reader.bus.last_event(subjects.deploy_event("jaffle_shop", "deployed"))
        assert latest.version.startswith(newer)

        async def current():
            code, body = await get_json(f"{reader.api_url}/v1/projects")
            found = body.get("projects", []) if code == 200 else []
            return found if found and found[0]["version"] else None

        projects = await wait_for(current, timeout=60)
        assert projects[0]["version"].startswith(newer), projects
        code, graph = await get_json(f"{reader.api_url}/v1/projects/jaffle_shop/graph")
        assert code == 200 and graph["version"].startswith(newer)
    finally:
        if runner is not None:
            await runner.stop()
        await reader.stop()


def _columns(path: Path, schema: str, table: str) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = ? AND table_name = ?",
            [schema, table],
        ).fetchall()
    finally:
        con.close()
    return {r[0] for r in rows}


async def test_a_ci_run_builds_into_a_scratch_schema_and_publishes_nothing(stack, project_copy):
    """The README's CI line: after a change, `run --defer -s state:modified+ --schema S`
    builds the changed model and its children into S, reading unbuilt refs from production,
    leaves production's relations as they were, and never publishes the state."""
    assert (await jetdbt(stack, "deploy", str(project_copy))).returncode == 0
    full = await jetdbt(stack, "run", "jaffle_shop", "--run-id", "prod1")
    assert full.returncode == 0, full.stdout
    model = project_copy / "models" / "staging" / "stg_payments.sql"
    model.write_text(model.read_text().replace("    order_id,", "    order_id,\n    1 as ci_mark,"))
    assert (await jetdbt(stack, "deploy", str(project_copy))).returncode == 0
    ci = await jetdbt(
        stack, "run", "jaffle_shop", "--defer", "-s", "state:modified+", "--schema", "ci_pr_7",
        "--json",
    )  # fmt: skip
    result = json.loads(ci.stdout)
    assert result["status"] == "passed", result.get("error")
    built = {n["name"] for n in result["nodes"] if n["resource_type"] == "model"}
    assert built == {"stg_payments", "orders", "customers"}, built
    assert result["deferred_to"] == "prod1"
    warehouse = stack.settings.default_duckdb
    assert "ci_mark" in _columns(warehouse, "ci_pr_7", "stg_payments")
    assert "ci_mark" not in _columns(
        warehouse, "jaffle_shop", "stg_payments"
    )  # production untouched
    assert not _columns(warehouse, "ci_pr_7", "stg_orders")  # unbuilt refs read production
    state = await stack.bus.last_event(
        subjects.state_event("jaffle_shop", "4:main|4:main|11:jaffle_shop|9:warehouse", "published")
    )
    assert state.run_id == "prod1"
    refused = await jetdbt(stack, "run", "jaffle_shop", "--schema", "ci; drop")
    assert refused.returncode != 0 and "not a plain schema name" in refused.stderr

"""The first hour, as a new user meets it: a real `jetdbt up` in one folder, the CLI in others,
the mistakes people make. Each test reproduces one thing a new user ran into."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from tests.support.helpers import JETDBT, get_json
from tests.support.paths import EXAMPLE
from tests.support.shared_stack import shared_stack
from tests.support.up import STACK_ENV, Up


@pytest.fixture(scope="module")
def up(tmp_path_factory, pg_url):
    machine = tmp_path_factory.mktemp("machine")
    started = Up(machine, machine / "stacks", pg_url)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def shop(up, tmp_path_factory) -> tuple[Path, str]:
    """The example, deployed from a folder of its own, and the id of a run that passed."""
    project = tmp_path_factory.mktemp("work") / "jaffle_shop"
    shutil.copytree(EXAMPLE, project)
    deployed = up.cli("deploy", ".", cwd=project)
    assert deployed.returncode == 0, deployed.stderr
    ran = up.cli("run", "jaffle_shop", "-s", "+stg_orders", "--json", cwd=project)
    assert ran.returncode == 0, ran.stderr
    return project, json.loads(ran.stdout)["run_id"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory, pg_url, environments_cache):
    """One stack for the tests that only read from one (nothing deployed)."""
    async with shared_stack(tmp_path_factory.mktemp("stack"), pg_url, environments_cache) as st:
        yield st


def _closed_pipe() -> int:
    """A pipe whose reader already left, as `| head` leaves once it has its lines."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.dbt
def test_deploy_of_a_folder_with_many_skipped_files_and_a_stack_inside_it(up, tmp_path):
    """900 images and the `.jetdbt/` of a `jetdbt up` started inside the project: the skipped
    list no longer rides in the command (it went over the 64 KiB limit and was refused or,
    past 128 KiB, crashed), `.jetdbt/` is left out, and each step is said."""
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    (project / "images").mkdir()
    for i in range(900):
        (project / "images" / f"photo_{i:04d}_of_the_team_offsite.png").write_bytes(b"\x89PNG\0")
    for i in range(2000):  # the embedded servers' many small files
        folder = project / ".jetdbt" / "pg" / f"base{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}").write_text("x")
    began = time.monotonic()
    deployed = up.cli("deploy", ".", "--project", "big_shop", cwd=project, timeout=240)
    assert deployed.returncode == 0, (deployed.stdout, deployed.stderr)
    assert "Traceback" not in deployed.stderr
    out = deployed.stdout.splitlines()
    assert "skipped .jetdbt: jetdbt's own data (JETDBT_HOME of a `jetdbt up` started here)" in out
    assert any(line.startswith("skipped 900 files (binary: ") for line in out), out
    assert out[-2].startswith("deployed big_shop version sha256:"), out
    assert out[-1].startswith("prod: (nothing) → sha256:"), out
    for step in ("jetdbt: packing .", "jetdbt: uploading the bundle", "jetdbt: deploying big_shop"):
        assert step in deployed.stderr, deployed.stderr
    assert time.monotonic() - began < 200


def test_deploy_or_parse_of_a_folder_that_is_no_dbt_project_says_so_in_one_line(tmp_path):
    (tmp_path / "notes").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
    for args in (["deploy", str(tmp_path / "notes")], ["parse", "missing"]):
        done = subprocess.run(
            [JETDBT, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
        assert "not a dbt project: the folder" in done.stderr, done.stderr
    assert "missing: not a dbt project: the folder does not exist" in done.stderr


@pytest.mark.dbt
def test_logs_and_status_into_a_pipe_whose_reader_left_end_quietly(up, shop):
    """`jetdbt logs RUN | head` and `jetdbt status --project P | head`."""
    project, run_id = shop
    for args in (["logs", run_id], ["status", "--project", "jaffle_shop"]):
        pipe = _closed_pipe()
        try:
            done = up.cli(*args, cwd=project, stdout=pipe, stderr=subprocess.PIPE)
        finally:
            os.close(pipe)
        assert done.returncode == 141, done.stderr  # as `yes | head` ends: SIGPIPE's code
        assert done.stderr == "", done.stderr


@pytest.mark.dbt
def test_status_prints_tables_and_json_or_yaml_keep_the_data(up, shop):
    project, run_id = shop
    runs = up.cli("status", "--project", "jaffle_shop", cwd=project)
    assert runs.returncode == 0, runs.stderr
    head, *rows = runs.stdout.splitlines()
    assert head.split() == ["run", "id", "status", "env", "command", "job", "trigger"] + [
        "requested",
        "by",
        "started",
        "took",
        "nodes",
    ]
    mine = next(row for row in rows if row.startswith(run_id))
    assert mine.split()[1:4] == ["passed", "prod", "build"] and mine.endswith("5 passed"), mine

    one = up.cli("status", run_id, cwd=project)
    assert one.returncode == 0, one.stderr
    lines = one.stdout.splitlines()
    assert lines[0] == f"run {run_id} of jaffle_shop: passed (5 passed)"
    # Piped, a long name is printed whole, never cut with an ellipsis.
    long_name = (
        "accepted_values_stg_orders_status__placed__shipped__completed__return_pending__returned"
    )
    assert any(line.split()[3:4] == [long_name] for line in lines), one.stdout
    assert "…" not in one.stdout

    as_json = json.loads(up.cli("status", run_id, "--json", cwd=project).stdout)
    as_yaml = yaml.safe_load(up.cli("status", run_id, "--yaml", cwd=project).stdout)
    assert as_json["run_id"] == run_id and len(as_json["nodes"]) == 5
    assert as_yaml["run_id"] == run_id and len(as_yaml["nodes"]) == 5


def test_the_cli_finds_the_stack_from_any_folder_or_names_what_to_set(up, tmp_path):
    """From a dbt project's folder, with no JETDBT_HOME: the stack `jetdbt up` records for its
    user. With none running, the message names JETDBT_HOME and never sends a user to start
    one inside the project."""
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    found = up.cli("status", cwd=project)
    assert found.returncode == 0, found.stderr
    assert "projection" in found.stdout

    nothing = {**up.env(), "JETDBT_STACKS_DIR": str(tmp_path / "none")}
    lost = up.cli("status", cwd=project, env=nothing)
    assert lost.returncode == 2
    message = lost.stderr.strip()
    assert message.startswith(
        f"jetdbt: no jetdbt stack is running for JETDBT_HOME={project}/.jetdbt"
    )
    assert "from a folder that is not a dbt project" in message, message
    assert "set JETDBT_HOME to a running stack's folder" in message, message
    assert not (project / ".jetdbt").exists()


def test_the_up_banner_names_the_admin_token_and_a_token_line_that_works(up, tmp_path):
    token_file = up.folder / ".jetdbt" / "access" / "admin.token"
    assert f"  the admin token is in {token_file}" in up.banner, up.banner
    assert token_file.stat().st_mode & 0o777 == 0o600
    line = next(b for b in up.banner if b.startswith("  a token of your own: "))
    argv = shlex.split(line.removeprefix("  a token of your own: "))
    assert Path(argv[0]).name == "jetdbt", argv
    created = up.cli(*argv[1:], cwd=tmp_path)  # as written, from another folder
    assert created.returncode == 0, created.stderr
    assert "jdbt_" in created.stdout


def test_up_help_lists_what_changes_it():
    done = subprocess.run([JETDBT, "up", "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    for setting in ("JETDBT_HOME", "JETDBT_API_PORT", "NATS_URL", "DATABASE_URL", "RUN_MEMORY"):
        assert f"  {setting} " in done.stdout, done.stdout


@pytest.mark.asyncio(loop_scope="module")
async def test_token_errors_read_alike_in_every_command(stack):
    """A wrong JETDBT_TOKEN: one line in one format from each reading command (it was YAML
    `error: ...` from one, the raw JSON body from another)."""
    from tests.support.helpers import cli_env

    env = {**cli_env(stack), "JETDBT_TOKEN": "jdbt_000000000000_wrong"}
    seen = []
    for args in (["status", "somerun"], ["status", "--project", "shop"], ["status"]):
        done = await asyncio.to_thread(  # off the loop: the stack answers on it
            subprocess.run, [JETDBT, *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done
        assert len(done.stderr.splitlines()) == 1 and done.stdout == "", done
        path, _, rest = done.stderr.strip().removeprefix("jetdbt: GET ").partition(": ")
        assert path.startswith("/v1/"), done.stderr
        seen.append(rest)
    assert len(set(seen)) == 1, seen
    assert seen[0] == (
        "401 token 000000000000 is unknown or revoked, or its secret is wrong;"
        " set JETDBT_TOKEN to a token of this stack (`jetdbt token create`)"
    )


@pytest.mark.asyncio(loop_scope="module")
async def test_an_unknown_relation_is_a_404_naming_it(stack):
    url = f"{stack.api_url}/v1/relations/dbt:%2F%2Fmain%2Fmain%2Fnowhere"
    status, body = await get_json(url)
    assert status == 404, body
    assert body["error"].startswith("relation 'dbt://main/main/nowhere' is not known")


@pytest.mark.dbt
def test_a_stack_that_built_stops_without_a_leaked_semaphore_warning(tmp_path, pg_url):
    started = Up(tmp_path, tmp_path / "stacks", pg_url)
    try:
        deployed = started.cli("deploy", str(EXAMPLE), cwd=tmp_path)
        assert deployed.returncode == 0, deployed.stderr
    finally:
        code = started.stop()
    assert code == 0
    errors = started.errors()
    assert "leaked semaphore" not in errors and "resource_tracker" not in errors, errors

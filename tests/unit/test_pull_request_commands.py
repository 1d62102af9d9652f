"""A pull request's commands, attacked: a close names no schema and runs only as a PR's run,
a PR number out of range is refused naming it, and the runner's close drops the PR's own
schema only, through a macro it writes inside the job's project."""

from __future__ import annotations

import shutil

import msgspec
import pytest
from jetdbt.services.cli.parser import build_parser
from jetdbt.services.runner.setup import close_pr
from jetdbt.services.runner.setup.plan import command_args, make_plan
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import Warehouse
from jetdbt.shared.bus import commands
from jetdbt.shared.project import descriptor
from jetdbt.shared.project.schema_names import pr_schema

from tests.support.paths import EXAMPLE


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"command": {"label": "close_pr"}}, "names its pr"),
        ({"command": {"label": "close_pr", "schema": "main"}, "pr": 3}, "takes no schema"),
        ({"command": {"label": "close_pr", "select": ["orders"]}, "pr": 3}, "takes no select"),
        ({"command": {"label": "close_pr", "defer": True}, "pr": 3}, "takes no defer"),
        ({"command": {"label": "build"}, "pr": -1}, "$.pr"),
        ({"command": {"label": "build"}, "pr": commands.MAX_PR + 1}, "$.pr"),
        ({"command": {"label": "build"}, "pr": "7"}, "$.pr"),
    ],
)
def test_a_bad_pull_request_run_is_refused_naming_what_is_wrong(body, named):
    with pytest.raises(commands.CommandRejected, match=named.replace("$", r"\$")):
        commands.decode_run(msgspec.json.encode(body))


def test_a_deploy_with_a_pr_out_of_range_is_refused_naming_it():
    body = {"bundle_digest": "sha256:" + "0" * 64, "bundle_size": 1, "pr": commands.MAX_PR + 1}
    with pytest.raises(commands.CommandRejected, match=r"\$\.pr"):
        commands.decode_deploy(msgspec.json.encode(body))


def test_a_job_cannot_close_a_pull_request():
    with pytest.raises(ValueError, match="cannot close a pull request"):
        commands.JobSpec(command=commands.ClosePrCommand())


def test_the_ci_commands_parse_and_a_pr_out_of_range_is_refused(capsys):
    parser = build_parser()
    args = parser.parse_args(["ci", "close", "--pr", "3", "--project", "shop", "--json"])
    assert (args.path, args.pr, args.project, args.json) == ("close", 3, "shop", True)
    args = parser.parse_args(["ci", "shop", "--pr", "3", "--env", "staging", "-s", "orders+"])
    assert (args.env, args.select) == ("staging", ["orders+"])
    for bad in ("0", "-1", str(commands.MAX_PR + 1), "seven"):
        with pytest.raises(SystemExit):
            parser.parse_args(["ci", "shop", "--pr", bad])
        assert "a pull request's number is 1 to" in capsys.readouterr().err


def _plan(tmp_path, schema: str | None):
    project = tmp_path / "shop"
    if not project.exists():
        shutil.copytree(EXAMPLE, project)
    wh = Warehouse(type="duckdb", name="main", path=str(tmp_path / "wh.duckdb"))
    cmd = commands.BuildCommand(schema=schema)
    return make_plan(
        descriptor.load(project), cmd, {}, wh, Resolver(), project, "dbt-core-1x", project="shop"
    )


def test_a_close_drops_only_the_pull_requests_own_schema(tmp_path):
    home = _plan(tmp_path, None).environment.schema
    assert close_pr.problem(_plan(tmp_path, pr_schema(home, 3)), 3) is None
    # Its environment's schema, another PR's, a scratch schema, or no PR at all: refused.
    assert "only as a pull request's check" in close_pr.problem(_plan(tmp_path, None), 3)
    assert f"drops schema {pr_schema(home, 3)!r} only" in close_pr.problem(
        _plan(tmp_path, pr_schema(home, 4)), 3
    )
    assert close_pr.problem(_plan(tmp_path, "ci_pr_3"), 3) is not None
    assert close_pr.problem(_plan(tmp_path, pr_schema(home, 3)), 0) is not None
    plan = _plan(tmp_path, pr_schema(home, 3))
    assert command_args(plan, commands.ClosePrCommand(), []) == [close_pr.MACRO]


def test_the_close_macro_lands_in_the_projects_first_macro_path_and_never_outside(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project)
    assert close_pr.write_macro(project) is None
    written = (project / "macros" / f"{close_pr.MACRO}.sql").read_text()
    assert "adapter.drop_schema" in written and "target.schema" in written
    (project / "dbt_project.yml").write_text("name: shop\nmacro-paths: ['../elsewhere']\n")
    assert "macro-paths" in close_pr.write_macro(project)
    (project / "own").symlink_to(tmp_path)
    (project / "dbt_project.yml").write_text("name: shop\nmacro-paths: ['own']\n")
    assert "outside the project" in close_pr.write_macro(project)
    (project / "dbt_project.yml").write_text('name: shop\nmacro-paths: "{{ x }}"\n')
    assert "not a list" in close_pr.write_macro(project)
    assert not (tmp_path / f"{close_pr.MACRO}.sql").exists()

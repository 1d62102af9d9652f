"""Warehouse grants (which teams may use each) and the refusal of a warehouse on jetdbt's
own database: the rules alone, read from real files."""

from __future__ import annotations

import socket

import pytest
import yaml
from jetdbt.services.runner.setup.own_database import (
    OwnDatabase,
    Place,
    check,
    check_job,
    place_of_url,
)
from jetdbt.services.runner.setup.plan import PlanRefused, make_plan
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.warehouses import Warehouse, load_warehouses
from jetdbt.shared.identity import warehouse_grants
from jetdbt.shared.project import descriptor

OWN = "postgresql://jetdbt:s3cret-pw@127.0.0.1:5433/jetdbt?sslmode=require"


def _file(tmp_path, warehouses: dict):
    path = tmp_path / "warehouses.yaml"
    path.write_text(yaml.safe_dump({"warehouses": warehouses}))
    return path


def test_teams_are_granted_as_written_and_an_omitted_key_grants_every_team(tmp_path):
    path = _file(
        tmp_path,
        {
            "alpha_wh": {"type": "duckdb", "path": "/d/a.duckdb", "teams": ["alpha"]},
            "open": {"type": "duckdb", "path": "/d/o.duckdb"},
            "closed": {"type": "duckdb", "path": "/d/c.duckdb", "teams": []},
        },
    )
    grants = warehouse_grants.load(path)
    assert grants == {"alpha_wh": ["alpha"], "open": None, "closed": []}
    assert {n: w.teams for n, w in load_warehouses(path, tmp_path / "x").items()} == grants
    assert warehouse_grants.load(None) == {"main": None}
    warehouse_grants.check("alpha_wh", "alpha", grants["alpha_wh"])
    warehouse_grants.check("open", "beta", grants["open"])
    with pytest.raises(warehouse_grants.NotGranted) as refused:
        warehouse_grants.check("alpha_wh", "beta", grants["alpha_wh"])
    assert "warehouse 'alpha_wh' is not granted to team 'beta'" in str(refused.value)
    assert "'alpha'" not in str(refused.value)  # another team's name is not told
    with pytest.raises(warehouse_grants.NotGranted):
        warehouse_grants.check("closed", "alpha", grants["closed"])


@pytest.mark.parametrize(
    "teams, said",
    [("alpha", "Expected `array | null`, got `str`"), ([""], "Expected `str` of length >= 1")],
)
def test_malformed_teams_are_refused_naming_the_warehouse(tmp_path, teams, said):
    path = _file(tmp_path, {"wh": {"type": "duckdb", "path": "/d/w.duckdb", "teams": teams}})
    with pytest.raises(ValueError, match=f"warehouse 'wh': 'teams' {said}"):
        warehouse_grants.load(path)
    with pytest.raises(ValueError, match="warehouse 'wh'"):
        load_warehouses(path, tmp_path / "x")


@pytest.mark.parametrize(
    "connection",
    [
        {"host": "localhost", "port": 5433, "dbname": "jetdbt"},
        {"host": "::1", "port": 5433, "dbname": "jetdbt"},
        {"host": "LOCALHOST", "connection": {"port": "5433", "database": "jetdbt"}},
        {"host": "localhost", "port": 5433, "dbname": "template1"},  # another database
        {"host": "127.1", "port": 5433, "dbname": "postgres"},
        {"host": "0.0.0.0", "port": 5433, "dbname": "postgres"},
        {"host": "2130706433", "port": 5433, "dbname": "postgres"},
        {"host": "::ffff:127.0.0.1", "port": 5433, "dbname": "postgres"},
        {"host": "127.0.0.2", "port": 5433, "dbname": "postgres"},
        {"host": socket.gethostname(), "port": 5433, "dbname": "postgres"},
    ],
)
def test_a_warehouse_on_jetdbts_own_server_is_refused_naming_both(tmp_path, connection):
    path = _file(tmp_path, {"pgwh": {"type": "postgres", "user": "beta", **connection}})
    with pytest.raises(OwnDatabase) as refused:
        check(load_warehouses(path, tmp_path / "x"), place_of_url(OWN), Resolver({}))
    said = str(refused.value)
    assert "warehouse 'pgwh' reaches jetdbt's own database server (127.0.0.1:5433)" in said
    assert "s3cret" not in said


@pytest.mark.parametrize(
    "host, port", [("127.0.0.1,127.0.0.1", 5433), ("db.example,localhost", 5433), ("h", "1,2")]
)
def test_a_list_of_servers_is_refused_naming_it(tmp_path, host, port):
    output = {"type": "postgres", "user": "u", "host": host, "port": port}
    path = _file(tmp_path, {"pgwh": {"type": "dbt_profile", "output": output}})
    with pytest.raises(OwnDatabase, match=f"warehouse 'pgwh': host '{host}', port '{port}' is a"):
        check(load_warehouses(path, tmp_path / "x"), place_of_url(OWN), Resolver({}))


@pytest.mark.parametrize(
    "connection",
    [
        {"host": "localhost", "port": 5432, "dbname": "jetdbt"},  # another server
        {"host": "192.0.2.1", "port": 5433, "dbname": "jetdbt"},  # another host
    ],
)
def test_another_server_passes(tmp_path, connection):
    path = _file(tmp_path, {"pgwh": {"type": "postgres", "user": "beta", **connection}})
    check(load_warehouses(path, tmp_path / "x"), place_of_url(OWN), Resolver({}))


def test_the_same_socket_folder_is_the_same_server_whatever_the_database(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    own = place_of_url(f"postgresql://postgres:@/postgres?host={folder}")
    assert own == (str(folder.resolve()), 5432)
    monkeypatch.setenv("WH_HOST", str(tmp_path / "link"))
    output = {"type": "postgres", "host": "$env:WH_HOST", "user": "u", "dbname": "template1"}
    path = _file(tmp_path, {"raw": {"type": "dbt_profile", "output": output}})
    with pytest.raises(OwnDatabase, match="warehouse 'raw' reaches .* server \\(socket "):
        check(load_warehouses(path, tmp_path / "x"), own, Resolver({}))
    check_job(Place(str(tmp_path / "elsewhere"), 5432), own)  # another server's socket
    for local in ("127.0.0.1", "localhost", "0.0.0.0"):  # the socket's server, by TCP
        with pytest.raises(OwnDatabase, match="this project's profile reaches"):
            check_job(Place(local, 5432), own)
    check_job(Place("127.0.0.1", 5433), own)


def test_an_own_profiles_duckdb_file_lies_in_its_warehouses_folder_or_its_job(tmp_path):
    """Only those folders may become writable by, and owned by, the sandbox's user."""
    project = tmp_path / "job" / "project"
    project.mkdir(parents=True)
    (project / "dbt_project.yml").write_text("name: p\nversion: '1'\nprofile: p\n")
    (project / "jetdbt.yaml").write_text(
        "profile:\n  profiles_yml: profiles.yml\n  warehouse: main\n"
    )
    wh = Warehouse(type="duckdb", name="main", path=str(tmp_path / "wh" / "w.duckdb"))

    def folder(path: str) -> str | None:
        output = {"type": "duckdb", "path": path}
        profiles = {"p": {"target": "x", "outputs": {"x": output}}}
        (project / "profiles.yml").write_text(yaml.safe_dump(profiles))
        desc = descriptor.load(project)
        plan = make_plan(desc, None, None, wh, Resolver({}), project, "dbt-core-1x", project="p")
        return plan.warehouse_folder

    assert folder(str(tmp_path / "wh" / "own.duckdb")) == str(tmp_path / "wh")
    assert folder(str(tmp_path / "job" / "data" / "x.duckdb")) is None  # the job's, writable
    for outside in ("/etc", "/root/.ssh", str(tmp_path)):
        with pytest.raises(PlanRefused, match=f"lies in {outside}, outside warehouse 'main'"):
            folder(f"{outside}/x.duckdb")

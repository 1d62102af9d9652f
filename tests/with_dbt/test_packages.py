"""dbt packages against real NATS, Postgres, git and dbt: resolved once at deploy, pinned by
their lock, restored for every run, never resolved again by a run."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile

import pytest
from jetdbt.services.cli import client
from jetdbt.services.runner.provision import packages
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.identity import principals

from tests.support.helpers import closed_port, deploy_and_wait, duckdb_tables, write_files

pytestmark = pytest.mark.dbt

PROJECT = {
    "dbt_project.yml": (
        "name: pkgs\nversion: '1.0'\nconfig-version: 2\nprofile: pkgs\n"
        # Not dbt's default folder: the install path is dbt_project.yml's to choose.
        "packages-install-path: vendored\n"
    ),
    "models/answer.sql": "select {{ localpkg.local_one() }} + {{ gitpkg.git_two() }} as answer",
    "pkgs/localpkg/dbt_project.yml": "name: localpkg\nversion: '1.0'\nconfig-version: 2\n",
    "pkgs/localpkg/macros/one.sql": "{% macro local_one() %}1{% endmacro %}",
}
GIT_PACKAGE = {
    "dbt_project.yml": "name: gitpkg\nversion: '1.0'\nconfig-version: 2\n",
    "macros/two.sql": "{% macro git_two() %}2{% endmacro %}",
}


def _git(*args, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _bare_repository(tmp_path):
    """A dbt package in a local bare repository, cloned over file:// like any git host."""
    work = tmp_path / "gitpkg"
    write_files(work, GIT_PACKAGE)
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", ".", cwd=work)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pkg", cwd=work)
    bare = tmp_path / "gitpkg.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    shutil.rmtree(work)
    subprocess.run(["chmod", "-R", "a+rX", str(bare)], check=True)
    return bare


def _lock_of(blob: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return tar.extractfile(packages.LOCK).read()


async def _build(stack, project="pkgs") -> ev.RunFinished:
    final = await client.run(stack.bus, project, RunCommand(command=BuildCommand()))
    assert isinstance(final, ev.RunFinished), final
    assert final.result.status == "passed", [n.message for n in final.result.nodes]
    return final


async def test_local_and_git_packages_are_pinned_at_deploy_and_restored_for_runs(stack, tmp_path):
    bare = _bare_repository(tmp_path)
    project = tmp_path / "pkgs"
    write_files(project, PROJECT)
    (project / "packages.yml").write_text(
        f"packages:\n  - local: pkgs/localpkg\n  - git: 'file://{bare}'\n    revision: main\n"
    )
    deployed = await deploy_and_wait(stack.bus, project, "pkgs")
    lock = _lock_of(await stack.bus.get_blob(deployed.packages_digest))
    assert deployed.package_lock_digest == digest_of(lock)
    assert b"file://" in lock and b"pkgs/localpkg" in lock

    # From here on nothing can be fetched: a run (or deploy) that resolved would fail.
    shutil.rmtree(bare)
    await _build(stack)
    assert "answer" in duckdb_tables(stack.settings.default_duckdb)
    trees = stack.settings.runner_cache / "packages" / "trees"
    # A cold runner (its cache gone) restores the deploy's own tree from the object store.
    shutil.rmtree(trees)
    await _build(stack)
    assert [p.name for p in trees.iterdir()] == [deployed.packages_digest.replace(":", "-")]

    # A changed version committing the lock dbt wrote: no `dbt deps` (its repository is
    # gone), the same pinned tree, the same lock.
    (project / packages.LOCK).write_bytes(lock)
    (project / "models/other.sql").write_text("select 1 as id")
    again = await deploy_and_wait(stack.bus, project, "pkgs")
    assert again.version != deployed.version
    assert (again.packages_digest, again.package_lock_digest) == (
        deployed.packages_digest,
        deployed.package_lock_digest,
    )
    await _build(stack)

    # Another team, the same files and committed lock: no tree of the first team's (which
    # would hand it that team's private git packages) -- its deps runs, and fails here,
    # since the repository is gone.
    await principals.put_principal(stack.bus, principals.Principal(name="bo", team="beta"))
    _, other = await client.deploy(stack.bus, project, "pkgs-beta", requested_by="bo")
    assert isinstance(other, ev.DeployFailed), other
    assert "dbt deps failed" in other.reason


def test_packing_or_linking_never_follows_a_link_deps_left(tmp_path):
    """What `dbt deps` leaves is what the project's code left: an install folder (or a
    folder on the way to it, or the lock) that is a link to the runner's own files is
    refused; nothing outside is read, deleted or written."""
    outside = tmp_path / "runner-secrets"
    write_files(outside, {"token": "s3cret", "b/data": "keep"})
    project = tmp_path / "job" / "project"
    project.mkdir(parents=True)
    (project / "dbt_packages").symlink_to(outside)
    with pytest.raises(packages.PackagesRefused, match="dbt_packages is a symbolic link"):
        packages.pack(project, "dbt_packages")
    (project / "a").symlink_to(outside)
    with pytest.raises(packages.PackagesRefused, match="a is a symbolic link"):
        packages.pack(project, "a/b")
    tree = tmp_path / "tree"
    write_files(tree, {"a/b/pkg/dbt_project.yml": "name: pkg"})
    with pytest.raises(packages.PackagesRefused, match="a is a symbolic link"):
        packages.PackageCache.link(tree, project, "a/b")
    (project / "dbt_packages").unlink()
    (project / "dbt_packages").mkdir()
    (project / packages.LOCK).symlink_to(outside / "token")
    with pytest.raises(packages.PackagesRefused, match="package-lock.yml is a symbolic link"):
        packages.pack(project, "dbt_packages")
    assert sorted(p.name for p in outside.rglob("*")) == ["b", "data", "token"]
    assert (outside / "b" / "data").read_text() == "keep"


async def test_an_unreachable_hub_fails_the_deploy_naming_the_package(stack, tmp_path, monkeypatch):
    # dbt's own setting for the hub's address, pointed at a loopback port nobody listens on.
    monkeypatch.setenv("DBT_PACKAGE_HUB_URL", f"http://127.0.0.1:{closed_port()}/")
    project = tmp_path / "hub"
    write_files(project, {**PROJECT, "models/answer.sql": "select 1"})
    (project / "packages.yml").write_text(
        "packages:\n  - package: dbt-labs/dbt_utils\n    version: 1.3.0\n"
    )
    _, final = await client.deploy(stack.bus, project, "hub")
    assert isinstance(final, ev.DeployFailed), final
    assert "dbt deps failed (packages: dbt-labs/dbt_utils)" in final.reason
    # dbt's own message, with the address it could not reach.
    assert "External connection exception occurred" in final.reason
    assert "Connection refused" in final.reason
    # Only deps is handed the operator's hub (and credentials its URL may carry): a model's
    # env_var() in any other dbt process does not see it.
    seen = tmp_path / "seen"
    write_files(
        seen,
        {
            **PROJECT,
            "models/answer.sql": (
                "{% if env_var('DBT_PACKAGE_HUB_URL', '') %}"
                "{{ exceptions.raise_compiler_error('saw the hub') }}{% endif %} select 1"
            ),
        },
    )
    await deploy_and_wait(stack.bus, seen, "seen")

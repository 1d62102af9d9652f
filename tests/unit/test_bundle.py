"""Bundle acceptance rules: what is packed, skipped (with which reason) and refused."""

from __future__ import annotations

import os
import pathlib

import msgspec
import pytest
from jetdbt.shared.project.bundle import (
    MAX_FILE_BYTES,
    Bundle,
    BundleFile,
    BundleRefused,
    Packed,
    Skipped,
    check_path,
    pack,
    skip_reason,
    unpack,
)

from tests.support.paths import EXAMPLE


def _project(root: pathlib.Path, files: dict[str, bytes] | None = None) -> pathlib.Path:
    """A minimal dbt project plus the given extra files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dbt_project.yml").write_text("name: p\nprofile: p\nconfig-version: 2\n")
    (root / "models").mkdir(exist_ok=True)
    (root / "models" / "m.sql").write_text("select 1 as id\n")
    for rel, data in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def _reasons(packed: Packed) -> dict[str, str]:
    return {s.path: s.reason for s in packed.skipped}


def _bundle_bytes(*files: tuple[str, bytes]) -> bytes:
    """A bundle crafted by hand, as another system might send it."""
    return msgspec.msgpack.encode(Bundle(files=[BundleFile(p, d) for p, d in files]))


# --- skipped files -------------------------------------------------------------------


def test_binary_file_is_skipped(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p", {"seeds/blob.csv": b"id\n1\n\x00\x01\x02"})
    packed = pack(root)
    assert _reasons(packed) == {"seeds/blob.csv": "binary: NUL byte in the first 8000 bytes"}
    assert "seeds/blob.csv" not in packed.files


def test_nul_after_first_8000_bytes_is_text(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p", {"seeds/late.csv": b"a" * 8000 + b"\x00"})
    packed = pack(root)
    assert "seeds/late.csv" in packed.files
    assert packed.skipped == []


def test_oversized_file_is_skipped(tmp_path: pathlib.Path) -> None:
    size = MAX_FILE_BYTES + 1
    root = _project(tmp_path / "p", {"seeds/huge.csv": b"x" * size})
    packed = pack(root)
    reason = _reasons(packed)["seeds/huge.csv"]
    assert reason.startswith("too large")
    assert str(size) in reason
    assert str(MAX_FILE_BYTES) in reason
    assert "seeds/huge.csv" not in packed.files


def test_file_at_size_limit_is_packed(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p", {"seeds/edge.csv": b"x" * MAX_FILE_BYTES})
    assert "seeds/edge.csv" in pack(root).files


@pytest.mark.parametrize("name", [".env", ".env.local", ".envrc"])
def test_env_files_are_skipped_at_any_depth(tmp_path: pathlib.Path, name: str) -> None:
    root = _project(tmp_path / "p", {name: b"TOKEN=x\n", f"models/sub/{name}": b"TOKEN=y\n"})
    packed = pack(root)
    reasons = _reasons(packed)
    assert reasons[name] == "may hold secrets"
    assert reasons[f"models/sub/{name}"] == "may hold secrets"
    assert not any(name in p for p in packed.files)


def test_env_lookalikes_are_packed(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p", {"env.sql": b"select 1\n", "models/.environment": b"x\n"})
    packed = pack(root)
    assert {"env.sql", "models/.environment"} <= set(packed.files)


def test_skip_reason_order_and_none() -> None:
    assert skip_reason("models/m.sql", b"select 1", 8) is None
    assert skip_reason(".env", b"\x00", MAX_FILE_BYTES + 1) == "may hold secrets"


# --- skipped directories -------------------------------------------------------------


def test_dbt_output_dirs_are_skipped_once_each(tmp_path: pathlib.Path) -> None:
    root = _project(
        tmp_path / "p",
        {
            "target/manifest.json": b"{}",
            "target/run/a/b.sql": b"select 1",
            "logs/dbt.log": b"log\n",
            "dbt_packages/dbt_utils/dbt_project.yml": b"name: dbt_utils\n",
            ".git/HEAD": b"ref: refs/heads/main\n",
            "__pycache__/x.pyc": b"\x00",
            "macros/__pycache__/y.pyc": b"\x00",
            ".venv/pyvenv.cfg": b"home = x\n",
        },
    )
    packed = pack(root)
    assert _reasons(packed) == {
        "target": "dbt build output",
        "logs": "dbt logs",
        "dbt_packages": "installed by dbt deps at deploy",
        ".git": "version control metadata",
        "__pycache__": "Python bytecode cache",
        "macros/__pycache__": "Python bytecode cache",
        ".venv": "Python virtualenv",
    }
    assert packed.files == ["dbt_project.yml", "models/m.sql"]


def test_output_dir_names_below_top_level_are_packed(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p", {"models/logs/l.sql": b"select 1\n"})
    assert "models/logs/l.sql" in pack(root).files


# --- symlinks ------------------------------------------------------------------------


def test_symlink_leaving_project_is_refused(tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside.sql"
    outside.write_text("select 'secret'\n")
    root = _project(tmp_path / "p")
    (root / "models" / "leak.sql").symlink_to(outside)
    with pytest.raises(BundleRefused) as exc:
        pack(root)
    assert exc.value.path == "models/leak.sql"
    assert "symlink points outside the project root" in str(exc.value)
    assert "models/leak.sql" in str(exc.value)


def test_relative_symlink_escaping_with_dotdot_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "x.sql").write_text("select 1\n")
    root = _project(tmp_path / "p")
    (root / "models" / "shared").symlink_to("../../shared", target_is_directory=True)
    with pytest.raises(BundleRefused, match="symlink points outside the project root"):
        pack(root)


def test_symlink_inside_project_is_packed_as_content(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p", {"macros/real.sql": b"{% macro a() %}1{% endmacro %}\n"})
    (root / "models" / "alias.sql").symlink_to("../macros/real.sql")
    (root / "linked_macros").symlink_to("macros", target_is_directory=True)
    packed = pack(root)
    bundle = msgspec.msgpack.decode(packed.data, type=Bundle)
    by_path = {f.path: f.data for f in bundle.files}
    assert by_path["models/alias.sql"] == b"{% macro a() %}1{% endmacro %}\n"
    assert by_path["linked_macros/real.sql"] == by_path["macros/real.sql"]


def test_symlink_loop_is_refused(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p")
    (root / "models" / "again").symlink_to("..", target_is_directory=True)
    with pytest.raises(BundleRefused, match="symlink loop"):
        pack(root)


def test_dangling_symlink_inside_is_skipped(tmp_path: pathlib.Path) -> None:
    root = _project(tmp_path / "p")
    (root / "models" / "gone.sql").symlink_to("nowhere.sql")
    assert _reasons(pack(root)) == {"models/gone.sql": "broken symlink"}


# --- paths ---------------------------------------------------------------------------


def test_check_path_normalizes() -> None:
    assert check_path("models/m.sql") == "models/m.sql"
    assert check_path("./models//staging/./s.sql") == "models/staging/s.sql"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "absolute path"),
        ("C:/x.sql", "absolute path"),
        ("../x.sql", "'..' segment"),
        ("models/../../x.sql", "'..' segment"),
        ("models/..", "'..' segment"),
        ("", "empty path"),
        ("./", "empty path"),
        ("models\\m.sql", "backslash"),
        ("models/m\x00.sql", "NUL byte"),
    ],
)
def test_check_path_refuses(path: str, reason: str) -> None:
    with pytest.raises(BundleRefused) as exc:
        check_path(path)
    assert reason in exc.value.reason
    assert reason in str(exc.value)


@pytest.mark.parametrize(
    ("path", "reason"),
    [("/abs/evil.sql", "absolute path"), ("models/../../evil.sql", "'..' segment")],
)
def test_unpack_refuses_crafted_paths(tmp_path: pathlib.Path, path: str, reason: str) -> None:
    data = _bundle_bytes(("dbt_project.yml", b"name: p\n"), (path, b"evil"))
    dest = tmp_path / "a" / "dest"
    with pytest.raises(BundleRefused) as exc:
        unpack(data, dest)
    assert exc.value.path == path
    assert reason in str(exc.value)
    # Nothing written, not even the valid file: checks happen before any write.
    assert not (dest / "dbt_project.yml").exists()
    assert not (tmp_path / "evil.sql").exists()


def test_unpack_refuses_a_name_longer_than_a_filesystem_takes(tmp_path: pathlib.Path) -> None:
    data = _bundle_bytes(("dbt_project.yml", b"name: p\n"), ("models/" + "é" * 128 + ".sql", b"x"))
    with pytest.raises(BundleRefused, match="longer than 255 bytes"):
        unpack(data, tmp_path / "dest")
    assert not (tmp_path / "dest" / "dbt_project.yml").exists()


def test_unpack_refuses_garbage(tmp_path: pathlib.Path) -> None:
    with pytest.raises(BundleRefused, match="not a valid bundle"):
        unpack(b"\xc1not msgpack", tmp_path / "dest")


def test_unpack_refuses_duplicate_paths(tmp_path: pathlib.Path) -> None:
    data = _bundle_bytes(("a.sql", b"1"), ("./a.sql", b"2"))
    with pytest.raises(BundleRefused, match="duplicate path"):
        unpack(data, tmp_path / "dest")


def test_unpack_refuses_writing_through_symlink_in_dest(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (dest / "models").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(BundleRefused, match="outside the destination"):
        unpack(_bundle_bytes(("models/m.sql", b"x")), dest)
    assert not (tmp_path / "elsewhere" / "m.sql").exists()


# --- project, digest, round trip -----------------------------------------------------


def test_not_a_dbt_project_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("select 1\n")
    with pytest.raises(BundleRefused, match="not a dbt project: the folder has no dbt_project.yml"):
        pack(tmp_path)


def test_digest_is_deterministic_regardless_of_mtime(tmp_path: pathlib.Path) -> None:
    files = {"seeds/s.csv": b"id\n1\n", "macros/m.sql": b"{% macro m() %}{% endmacro %}\n"}
    first = _project(tmp_path / "one", files)
    second = _project(tmp_path / "two", dict(reversed(list(files.items()))))
    for path in second.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
    a, b, again = pack(first), pack(second), pack(first)
    assert a.digest == b.digest == again.digest
    assert a.data == b.data
    assert a.digest.startswith("sha256:") and len(a.digest) == len("sha256:") + 64
    assert a.size == len(a.data)
    assert a.files == sorted(a.files)

    (second / "seeds" / "s.csv").write_bytes(b"id\n2\n")
    assert pack(second).digest != a.digest


def test_round_trip_reproduces_files(tmp_path: pathlib.Path) -> None:
    root = _project(
        tmp_path / "p",
        {"seeds/s.csv": b"id,name\n1,\xc3\xa9\n", "models/staging/s.sql": b"select 2\n"},
    )
    packed = pack(root)
    dest = tmp_path / "out"
    written = unpack(packed.data, dest)
    assert written == packed.files
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(
        packed.files
    )
    for rel in packed.files:
        assert (dest / rel).read_bytes() == (root / rel).read_bytes()
    assert pack(dest).digest == packed.digest


def test_example_project_packs_cleanly() -> None:
    packed = pack(EXAMPLE)
    assert "dbt_project.yml" in packed.files
    assert "seeds/raw_orders.csv" in packed.files
    assert "models/staging/stg_payments.sql" in packed.files
    assert not any(p.endswith(".duckdb") for p in packed.files)
    assert all(isinstance(s, Skipped) for s in packed.skipped)

"""Bundle acceptance rules: which files of a dbt project are packed for deploy.

A bundle is a dbt project directory serialized as msgpack. Every rule that decides
what goes into a bundle, what is left out (and why) and what is refused lives here,
so the CLI, the deploy service and the runner agree on a single answer.
"""

from __future__ import annotations

import os
import pathlib
import re

import msgspec
from jetdbt.shared.blobs.digests import digest_of

__all__ = [
    "BINARY_SNIFF_BYTES",
    "MAX_BUNDLE_BYTES",
    "MAX_FILE_BYTES",
    "Bundle",
    "BundleFile",
    "BundleRefused",
    "Packed",
    "Skipped",
    "check_path",
    "project_file",
    "dir_skip_reason",
    "pack",
    "skip_reason",
    "unpack",
]

MAX_FILE_BYTES = 5 * 1024 * 1024
"""Larger files are almost never dbt sources; they would bloat every deploy."""

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
"""The largest bundle a deploy may send over the API: a dbt project's sources are far
smaller, and the API holds the body in memory while it stores it."""

BINARY_SNIFF_BYTES = 8000
"""Same heuristic as git: a NUL byte this early means the file is not text."""

NAME_MAX = 255  # bytes in a file's name, on the filesystems a job's folder is made on

# Directories left out only at the project root: dbt writes or installs them there.
_TOP_LEVEL_DIRS = {
    "target": "dbt build output",
    "logs": "dbt logs",
    "dbt_packages": "installed by dbt deps at deploy",
}
# Directories left out wherever they appear: tooling state, never project source.
_ANY_LEVEL_DIRS = {
    ".git": "version control metadata",
    "__pycache__": "Python bytecode cache",
    ".venv": "Python virtualenv",
    ".jetdbt": "jetdbt's own data (JETDBT_HOME of a `jetdbt up` started here)",
}
_SECRETS_REASON = "may hold secrets"
_DRIVE = re.compile(r"^[A-Za-z]:")


class BundleFile(msgspec.Struct, frozen=True):
    """One packed file: its posix path relative to the project root and its bytes."""

    path: str
    data: bytes


class Skipped(msgspec.Struct, frozen=True):
    """A file or directory left out of the bundle, with the reason shown to the user."""

    path: str
    reason: str


class Bundle(msgspec.Struct, frozen=True):
    """The serialized unit; files sorted by path so equal content encodes equally."""

    files: list[BundleFile]


class Packed(msgspec.Struct, frozen=True):
    """Result of pack: the encoded bundle, its content digest and what was left out."""

    data: bytes
    digest: str
    size: int
    files: list[str]
    skipped: list[Skipped]


class BundleRefused(ValueError):
    """The project (or a received bundle) cannot be accepted at all."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def check_path(path: str) -> str:
    """Normalize a bundle path, refusing anything that could land outside the project.

    Paths come from the local filesystem on pack and from another system on unpack,
    so both directions go through this one check.
    """
    if not isinstance(path, str):
        raise BundleRefused(repr(path), "path is not a string")
    if "\x00" in path:
        raise BundleRefused(repr(path), "path contains a NUL byte")
    if "\\" in path:
        raise BundleRefused(path, "path contains a backslash")
    if path.startswith("/") or _DRIVE.match(path):
        raise BundleRefused(path, "absolute path")
    parts = path.split("/")
    if ".." in parts:
        raise BundleRefused(path, "path contains a '..' segment")
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        raise BundleRefused(path, "empty path")
    if any(len(p.encode()) > NAME_MAX for p in parts):
        raise BundleRefused(path, f"a name in the path is longer than {NAME_MAX} bytes")
    return "/".join(parts)


def dir_skip_reason(rel_dir: str) -> str | None:
    """Why a whole directory is left out (its contents are never read), or None."""
    parts = rel_dir.split("/")
    name = parts[-1]
    if len(parts) == 1 and name in _TOP_LEVEL_DIRS:
        return _TOP_LEVEL_DIRS[name]
    return _ANY_LEVEL_DIRS.get(name)


def _name_reason(rel_path: str) -> str | None:
    """Rules decided by the file name alone, checked before the file is opened."""
    name = rel_path.rsplit("/", 1)[-1]
    if name in (".env", ".envrc") or name.startswith(".env."):
        return _SECRETS_REASON
    return None


def skip_reason(rel_path: str, head: bytes, size: int) -> str | None:
    """Why a file is left out of the bundle, or None to pack it.

    `head` is the start of the file (at least BINARY_SNIFF_BYTES when that many
    exist) and `size` its full length in bytes.
    """
    reason = _name_reason(rel_path)
    if reason is not None:
        return reason
    if size > MAX_FILE_BYTES:
        return f"too large: {size} bytes, over the limit of {MAX_FILE_BYTES} bytes"
    if b"\x00" in head[:BINARY_SNIFF_BYTES]:
        return f"binary: NUL byte in the first {BINARY_SNIFF_BYTES} bytes"
    return None


def _link_target(link: pathlib.Path, rel: str, root: pathlib.Path) -> pathlib.Path | None:
    """Follow a symlink (None when dangling); one leaving the project is refused.

    A link pointing outside would smuggle foreign files (or secrets) into the bundle.
    """
    try:
        try:
            target = link.resolve(strict=True)
        except FileNotFoundError:
            if not link.resolve().is_relative_to(root):
                raise BundleRefused(rel, "symlink points outside the project root") from None
            return None
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop (Python < 3.13)
        raise BundleRefused(rel, f"symlink cannot be resolved: {exc}") from exc
    if not target.is_relative_to(root):
        raise BundleRefused(rel, "symlink points outside the project root")
    return target


def _read(path: pathlib.Path, rel: str) -> tuple[bytes | None, str | None]:
    """Return (data, None) for a packable file or (None, reason) for a skipped one."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size > MAX_FILE_BYTES:
            return None, skip_reason(rel, fh.read(BINARY_SNIFF_BYTES), size)
        data = fh.read()
    reason = skip_reason(rel, data[:BINARY_SNIFF_BYTES], len(data))
    return (None, reason) if reason is not None else (data, None)


def _walk(
    real_dir: pathlib.Path,
    prefix: str,
    root: pathlib.Path,
    active: frozenset[pathlib.Path],
    files: list[BundleFile],
    skipped: list[Skipped],
) -> None:
    """Collect files under real_dir, naming them by the path the user sees (prefix)."""
    with os.scandir(real_dir) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        rel = check_path(f"{prefix}{entry.name}")
        is_link = entry.is_symlink()
        # Name rules first: a skipped entry is never opened or followed.
        if entry.is_dir(follow_symlinks=False) or is_link:
            reason = dir_skip_reason(rel)
            if reason is not None:
                skipped.append(Skipped(rel, reason))
                continue
        reason = _name_reason(rel)
        if reason is not None:
            skipped.append(Skipped(rel, reason))
            continue
        path: pathlib.Path | None = pathlib.Path(entry.path)
        if is_link:
            path = _link_target(path, rel, root)
            if path is None:
                skipped.append(Skipped(rel, "broken symlink"))
                continue
        if path.is_dir():
            real = path.resolve()
            if real in active:
                raise BundleRefused(rel, "symlink loop: points to an enclosing directory")
            _walk(real, f"{rel}/", root, active | {real}, files, skipped)
        elif path.is_file():
            data, reason = _read(path, rel)
            if data is None:
                skipped.append(Skipped(rel, reason or "skipped"))
            else:
                files.append(BundleFile(rel, data))
        else:
            skipped.append(Skipped(rel, "not a regular file"))


def project_file(root: pathlib.Path) -> pathlib.Path:
    """`root`'s dbt_project.yml; a folder without one is refused, naming the folder."""
    found = pathlib.Path(root).resolve() / "dbt_project.yml"
    if not found.is_file():
        where = "does not exist" if not found.parent.exists() else "has no dbt_project.yml"
        raise BundleRefused(str(root), f"not a dbt project: the folder {where}")
    return found


def pack(root: pathlib.Path) -> Packed:
    """Pack a dbt project directory into a deterministic bundle.

    The digest covers paths and contents only (never mtimes or modes), so it is
    the project version: identical content always deploys as the same version.
    """
    root = project_file(root).parent
    files: list[BundleFile] = []
    skipped: list[Skipped] = []
    _walk(root, "", root, frozenset({root}), files, skipped)
    files.sort(key=lambda f: f.path)
    skipped.sort(key=lambda s: s.path)
    data = msgspec.msgpack.encode(Bundle(files=files))
    return Packed(
        data=data,
        digest=digest_of(data),
        size=len(data),
        files=[f.path for f in files],
        skipped=skipped,
    )


def unpack(data: bytes, dest: pathlib.Path) -> list[str]:
    """Write a bundle's files under dest and return their paths.

    The bundle may come from another system, so every path is checked again and
    nothing is written until all of them have passed. Each folder is resolved once,
    not each file: a 5,000-model bundle resolved file by file took a second.
    """
    try:
        bundle = msgspec.msgpack.decode(data, type=Bundle)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise BundleRefused("<bundle>", f"not a valid bundle: {exc}") from exc
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    real_dest = dest.resolve()
    planned: dict[str, BundleFile] = {}
    for f in bundle.files:
        rel = check_path(f.path)
        if rel in planned:
            raise BundleRefused(rel, "duplicate path in bundle")
        planned[rel] = f
    folders: dict[str, str] = {}  # a folder, and the first file under it
    for rel in planned:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in planned:
                raise BundleRefused(rel, "a parent of this path is also a file in the bundle")
            folders.setdefault(folder, rel)
    # Guards against symlinks already present in dest: a folder, or a file written through.
    for folder, first in folders.items():
        if not _inside(real_dest, real_dest / folder):
            raise BundleRefused(first, "would be written outside the destination")
    for rel in planned:
        target = real_dest / rel
        if target.is_symlink() and not _inside(real_dest, target):
            raise BundleRefused(rel, "would be written outside the destination")
    for folder in folders:
        (real_dest / folder).mkdir(exist_ok=True)
    for rel, f in planned.items():
        (real_dest / rel).write_bytes(f.data)
    return list(planned)


def _inside(root: pathlib.Path, path: pathlib.Path) -> bool:
    return path.resolve().is_relative_to(root)

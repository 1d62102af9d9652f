"""dbt packages: resolved once at deploy, pinned by their lock, restored for every run.

A deploy of a project with packages.yml (or dependencies.yml) runs `dbt deps` unless this
runner already resolved the same package files and committed package-lock.yml. What deps
installed (the packages-install-path folder and the lock dbt wrote) becomes one blob; the
Deployed event names it and the lock's digest. Each runner unpacks a blob once into its
cache (JETDBT_HOME/runner/packages) and a job links that tree read-only, so every run of a
version builds with exactly its deploy's resolution and no run ever resolves anything.

A local package stays a link to the project's own folder (the version's files), never a
copy; a link that leads out of the project refuses the deploy, since its target would be
read (and packed) by the runner, outside any sandbox.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

import msgspec
from jetdbt.shared.blobs.digests import check_digest, digest_of
from jetdbt.shared.bus.connection import Bus

__all__ = [
    "LOCK",
    "PACKAGE_FILES",
    "PackageCache",
    "PackagesRefused",
    "Resolution",
    "declares_packages",
    "declared",
    "lock_bytes",
    "pack",
    "package_files",
    "resolution_key",
]

PACKAGE_FILES = ("packages.yml", "dependencies.yml")
LOCK = "package-lock.yml"


class PackagesRefused(ValueError):
    """The project's packages cannot be pinned or restored; the message says why."""


class Resolution(msgspec.Struct, frozen=True):
    """One resolution: the blob holding the tree, and the digest of the lock dbt wrote."""

    blob: str
    lock_digest: str | None


def declares_packages(project: Path) -> bool:
    return any((project / name).is_file() for name in PACKAGE_FILES)


def declared(project: Path) -> list[str]:
    """The packages the project's own files name (hub names, git URLs, local folders), for
    a failure to say which ones dbt could not fetch."""
    import yaml

    names = []
    for file in PACKAGE_FILES:
        try:
            doc = yaml.safe_load((project / file).read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        entries = doc.get("packages") if isinstance(doc, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict):
                name = entry.get("package") or entry.get("git") or entry.get("local")
                names += [str(name)] if name else []
    return names


def package_files(project: Path, install_path: str) -> list[list]:
    """Every packages.yml/dependencies.yml of the project (a local package's own included)
    with its bytes: read from the version's files before `dbt deps` runs, never after (deps
    could rewrite them)."""
    installed = project / install_path
    files = sorted(
        p
        for name in PACKAGE_FILES
        for p in project.rglob(name)
        if p.is_file() and not p.is_symlink() and installed not in p.parents
    )
    return [[p.relative_to(project).as_posix(), p.read_bytes()] for p in files]


def resolution_key(
    files: list[list], install_path: str, lock: bytes | None, *, team: str, hub: str
) -> str:
    """What a resolution depends on: the package files (`package_files`), the lock, where
    packages go, the package hub they came from and the team: a team only reuses trees its
    own deploys resolved, so no team gets another's (private git) packages or its mistakes."""
    return digest_of(msgspec.msgpack.encode([team, hub, install_path, lock, files]))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_unlinked(project: Path, relative: str, *, last: bool = True) -> Path:
    """`project/relative`, refused (PackagesRefused) when the project or any folder on the
    way is a symbolic link (with `last`, the place itself too): after `dbt deps` the
    project's folders are what a project's code left there, and the runner, outside any
    sandbox, must never read or write through a link it planted."""
    parts = Path(relative).parts
    place = project
    for depth, part in enumerate(("", *parts)):
        place = place / part if part else place
        if (last or depth < len(parts)) and place.is_symlink():
            raise PackagesRefused(
                f"{(Path(*parts[:depth]) if depth else Path('.')).as_posix()} is a symbolic"
                f" link ({os.readlink(place)}): packages-install-path and the folders on the"
                " way to it must be plain folders of the project"
            )
    return project / relative


def lock_bytes(project: Path) -> bytes | None:
    """The project's package-lock.yml, never through a link (PackagesRefused)."""
    lock = _check_unlinked(project, LOCK)
    return lock.read_bytes() if lock.is_file() else None


def pack(project: Path, install_path: str) -> tuple[bytes, bytes | None] | None:
    """The installed tree and the lock dbt wrote, as one reproducible blob (same tree, same
    bytes), and that lock; None when deps installed nothing.

    Raises PackagesRefused for a link that leads out of the project, or one on the way to
    the install folder (which is walked without following any)."""
    installed = _check_unlinked(project, install_path)
    lock = lock_bytes(project)
    if not installed.is_dir():
        return None
    root = project.resolve()
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for folder, dirs, files in os.walk(installed):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                _add(tar, Path(folder) / name, project, root)
        if lock is not None:
            info = tarfile.TarInfo(LOCK)
            info.size, info.mode = len(lock), 0o644
            tar.addfile(info, io.BytesIO(lock))
    return buf.getvalue(), lock


def _add(tar: tarfile.TarFile, path: Path, project: Path, root: Path) -> None:
    arcname = path.relative_to(project).as_posix()
    info = tarfile.TarInfo(arcname)
    if path.is_symlink():
        target = path.resolve()
        if not _inside(target, root):
            raise PackagesRefused(
                f"{arcname} links to {os.readlink(path)}, outside the project: a local package"
                " must lie inside the project (or be fetched from git or the hub)"
            )
        info.type = tarfile.SYMTYPE
        info.linkname = os.path.relpath(target, (root / arcname).parent)
        tar.addfile(info)
    elif path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif path.is_file():
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
            stat = os.fstat(fh.fileno())
            info.size, info.mode = stat.st_size, 0o644 | (stat.st_mode & 0o111)
            tar.addfile(info, fh)


class PackageCache:
    """This runner's resolutions and unpacked trees, under `root`: `resolved/<key>` says
    which blob a resolution key gave; `trees/<blob>` is that blob unpacked, never changed."""

    def __init__(self, root: Path):
        self.root = root

    def known(self, key: str) -> Resolution | None:
        try:
            return msgspec.json.decode((self._resolved(key)).read_bytes(), type=Resolution)
        except (OSError, msgspec.DecodeError):
            return None

    def remember(self, key: str, resolution: Resolution) -> None:
        file = self._resolved(key)
        file.parent.mkdir(parents=True, exist_ok=True)
        staging = file.with_name(f".{uuid.uuid4().hex}")
        staging.write_bytes(msgspec.json.encode(resolution))
        os.replace(staging, file)

    def _resolved(self, key: str) -> Path:
        return self.root / "resolved" / key.replace(":", "-")

    async def tree(self, bus: Bus, blob: str, data: bytes | None = None) -> Path:
        """Blob `blob` unpacked (fetched first unless `data` holds it); raises ValueError
        for a name that is not a digest, and the store's errors for a missing blob."""
        try:
            check_digest(blob)
        except ValueError as exc:
            raise PackagesRefused(f"<packages>: {exc}") from None
        target = self.root / "trees" / blob.replace(":", "-")
        if target.is_dir():
            return target
        if data is None:
            data = await bus.get_blob(blob)
        elif digest_of(data) != blob:
            raise ValueError(f"packages blob {blob} failed its digest check")
        staging = target.with_name(f".{uuid.uuid4().hex}")
        staging.mkdir(parents=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                tar.extractall(staging, filter="data")
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # else another job unpacked it first; the same bytes
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    @staticmethod
    def link(tree: Path, project: Path, install_path: str) -> None:
        """`tree` into the project: its install folder holds one link per package (to the
        tree's copy, or for a local package to the project's own folder), and its lock."""
        source = tree / install_path
        if not source.is_dir():
            raise PackagesRefused(
                f"the deploy installed packages elsewhere than packages-install-path"
                f" {install_path!r}: deploy the project again"
            )
        installed = _check_unlinked(project, install_path, last=False)
        if installed.is_symlink() or installed.is_file():
            installed.unlink()
        shutil.rmtree(installed, ignore_errors=True)
        installed.mkdir(parents=True)
        for entry in sorted(source.iterdir()):
            target = os.readlink(entry) if entry.is_symlink() else str(entry)
            os.symlink(target, installed / entry.name)
        if (tree / LOCK).is_file():
            (project / LOCK).unlink(missing_ok=True)  # a link there is replaced, not followed
            shutil.copyfile(tree / LOCK, project / LOCK)

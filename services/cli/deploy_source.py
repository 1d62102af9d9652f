"""Which folder a deploy comes from, so a project name is not taken over by another folder.

A folder is named by marks, and two deploys come from the same source when any mark is
shared:
- in a git work tree, the repository's first commit (every full clone has it) and a
  digest of each remote's address (a shallow CI clone has those), each with the
  project's path in the repository, so two projects of one repository are two sources;
- elsewhere, a digest of this machine's name and the folder's path (a copy is another
  folder; the path itself never leaves the machine).

So a re-deploy from the same folder, from a clone of it, or from a CI checkout of the same
repository keeps the project's source; the public jaffle shop deployed under the name of
the example is another one.
"""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
from pathlib import Path

__all__ = ["marks"]

GIT_SECONDS = 10  # a git that does not answer in this long leaves the folder's own mark


def _git(folder: Path, *args: str) -> list[str]:
    """git's output lines in `folder`, or [] when it is no git work tree (or no git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.split() if done.returncode == 0 else []


def _address(url: str) -> str:
    """A remote's address without what varies between clones of it: scheme, user, `.git`,
    case of the host (`git@github.com:o/r.git` and `https://github.com/o/r` are one)."""
    url = re.sub(r"^[a-z+]+://", "", url.strip())
    url = re.sub(r"^[^@/]+@", "", url)
    url = re.sub(r"^([^/:]+):(?!\d)", r"\1/", url)  # scp-like host:path
    url = url.rstrip("/").removesuffix(".git")
    host, _, path = url.partition("/")
    return f"{host.lower()}/{path}" if path else host.lower()


def marks(folder: Path) -> list[str]:
    """The marks of the project folder `folder` (see the module's docstring)."""
    folder = folder.resolve()
    if _git(folder, "rev-parse", "--is-inside-work-tree") == ["true"]:
        inside = _git(folder, "rev-parse", "--show-prefix")
        where = (inside[0] if inside else "").rstrip("/") or "."
        found = []
        if _git(folder, "rev-parse", "--is-shallow-repository") != ["true"]:
            roots = _git(folder, "rev-list", "--max-parents=0", "HEAD")
            found += [f"git-first-commit {root}:{where}" for root in sorted(roots)[:1]]
        for remote in _git(folder, "remote"):
            for url in _git(folder, "remote", "get-url", remote)[:1]:
                found.append(f"git-remote {_digest(_address(url))}:{where}")
        if found:
            return sorted(set(found))[:8]
    return [f"folder {_digest(f'{socket.gethostname()}:{folder}')}"]


def _digest(text: str) -> str:
    """What a mark records of an address or a path: never the text itself (a remote may
    be a local path, a path names a user)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]

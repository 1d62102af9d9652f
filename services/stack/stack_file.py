"""Where a running `jetdbt up` says it is: one small JSON file under JETDBT_HOME, and a
record per running stack in the user's own folder (`config.stacks_dir`), so a CLI started in
any folder of the machine finds it.

Kept apart from jetdbt.services.stack.composition so a command that only reads it (`jetdbt status`)
does not import the servers, the runner and the API to find the stack.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from jetdbt.shared.process.config import stacks_dir

__all__ = ["STACK_FILE", "forget_running", "read_stack_file", "record_running", "running_homes"]

STACK_FILE = "stack.json"


def read_stack_file(home: Path) -> dict | None:
    try:
        return json.loads((home / STACK_FILE).read_text())
    except (OSError, ValueError):
        return None


def _record(home: Path) -> Path:
    return stacks_dir() / (hashlib.sha256(str(home).encode()).hexdigest()[:16] + ".json")


def record_running(home: Path) -> None:
    """Say that this process serves the stack of `home` (0600: it names where secrets lie)."""
    path = _record(home)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"home": str(home), "pid": os.getpid()}))


def forget_running(home: Path) -> None:
    with contextlib.suppress(OSError):
        _record(home).unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_homes() -> list[Path]:
    """JETDBT_HOME of every stack of this user still running; a record its process outlived
    (a `jetdbt up` killed) is removed."""
    found = []
    with contextlib.suppress(OSError):
        for path in sorted(stacks_dir().glob("*.json")):
            try:
                record = json.loads(path.read_text())
                home, pid = Path(record["home"]), int(record["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if _alive(pid) and read_stack_file(home) is not None:
                found.append(home)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
    return found

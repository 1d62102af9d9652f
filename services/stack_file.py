"""Where a running `jetdbt up` says it is: one small JSON file under JETDBT_HOME.

Kept apart from services.stack so a command that only reads it (`jetdbt status`)
does not import the servers, the runner and the API to find the stack.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["STACK_FILE", "read_stack_file"]

STACK_FILE = "stack.json"


def read_stack_file(home: Path) -> dict | None:
    try:
        return json.loads((home / STACK_FILE).read_text())
    except (OSError, ValueError):
        return None

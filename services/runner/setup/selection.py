"""Asking dbt what a selection resolves to (`dbt ls --output json`), never reimplementing it."""

from __future__ import annotations

import json

from jetdbt.services.runner.setup.job_setup import Prepared

__all__ = ["resolve", "SelectionFailed"]


class SelectionFailed(RuntimeError):
    pass


async def resolve(prepared: Prepared, timeout: float | None = 600) -> list[str]:
    """Unique ids of the nodes the plan's selection names, as dbt resolves them."""
    plan = prepared.plan
    args = [
        *plan.common_args(),
        *plan.selection_args(),
        "--output",
        "json",
        "--output-keys",
        "unique_id",
        "--quiet",
    ]
    ls = prepared.dbt("ls", args, log_dir="logs-ls", target_dir="target-ls")
    if await ls.run(timeout=timeout) != 0:
        raise SelectionFailed("dbt ls failed:\n" + ls.error_tail())
    found = []
    for line in ls.lines:
        if line.startswith("{"):
            try:
                found.append(json.loads(line)["unique_id"])
            except (ValueError, KeyError):
                continue
    return found

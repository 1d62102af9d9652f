"""Asking dbt what a selection resolves to (`dbt ls --output json`), never reimplementing it."""

from __future__ import annotations

import json

from services.runner.dbt_process import DbtInvocation
from services.runner.plan import Plan
from services.runner.workspace import Job

__all__ = ["resolve", "SelectionFailed"]


class SelectionFailed(RuntimeError):
    pass


async def resolve(
    job: Job,
    plan: Plan,
    env: dict[str, str],
    executable: list[str],
    extra: list[str] | None = None,
    timeout: float | None = 600,
) -> list[str]:
    """Unique ids of the nodes the plan's selection names, as dbt resolves them."""
    args = [
        *plan.common_args(),
        *plan.selection_args(),
        *(extra or []),
        "--output",
        "json",
        "--output-keys",
        "unique_id",
        "--quiet",
    ]
    ls = DbtInvocation(
        "ls",
        args,
        job.project,
        job.profiles,
        env,
        executable=executable,
        log_dir="logs-ls",
        target_dir="target-ls",
    )
    if await ls.run(timeout=timeout) != 0:
        raise SelectionFailed("dbt ls failed:\n" + "\n".join(ls.lines[-20:]))
    found = []
    for line in ls.lines:
        if line.startswith("{"):
            try:
                found.append(json.loads(line)["unique_id"])
            except (ValueError, KeyError):
                continue
    return found

"""What a project owns in the graph: what its descriptor's selection resolves to.

Without this a narrowly selected project would register as the producer of every
model it parses, and two projects splitting one dbt project would each claim all
of it. dbt resolves the selection (`dbt ls`); nothing here interprets selectors.
Only the deploy's plan (the descriptor's own select/exclude/selector) may claim:
a run's override answers for that run, never for what the project owns.
"""

from __future__ import annotations

from jetdbt.services.runner.setup import selection
from jetdbt.services.runner.setup.job_setup import Prepared

__all__ = ["owned_nodes"]


async def owned_nodes(prepared: Prepared, timeout: float | None = 600) -> set[str] | None:
    """Unique ids the project claims; None when the descriptor selects nothing (all of it).

    Raises selection.SelectionFailed when dbt cannot resolve the selection.
    """
    if not prepared.plan.has_selection():
        return None
    found = await selection.resolve(prepared, timeout=timeout)
    return set(found)

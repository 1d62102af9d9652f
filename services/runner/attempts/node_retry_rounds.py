"""In-run node retry: after a failed build, rebuild what it left errored or skipped.

Each round selects the nodes to redo by name, so dbt's own indirect selection
brings their tests along. A data test that failed its assertion (status `fail`)
is deterministic: it is not retried unless a model it tests is rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterable

from jetdbt.services.runner.attempts.attempt import Attempt
from jetdbt.services.runner.setup.plan import option
from jetdbt.shared.bus.events import NodeResult
from jetdbt.shared.project.descriptor import RetryPolicy

__all__ = ["retry_rounds", "to_redo"]

_EXECUTABLE = {"model", "seed", "snapshot"}


def _selectors(manifest: dict | None) -> dict[str, str]:
    """unique_id -> the node's full fqn (`package.path.name`), which selects exactly it."""
    nodes = (manifest or {}).get("nodes", {})
    return {uid: ".".join(node["fqn"]) for uid, node in nodes.items() if node.get("fqn")}


def to_redo(nodes: Iterable[NodeResult], manifest: dict | None) -> tuple[list[str], list[str]]:
    """(selectors to rebuild, data tests left failed on purpose)."""
    fqn = _selectors(manifest)
    redo, kept = [], []
    for node in nodes:
        if node.status == "fail":
            kept.append(node.unique_id)
        elif node.outcome in ("failed", "skipped") and (
            node.resource_type in _EXECUTABLE or node.status == "error"
        ):
            redo.append(fqn.get(node.unique_id, node.name))
    return sorted(set(redo)), sorted(kept)


async def retry_rounds(
    attempt: Attempt, policy: RetryPolicy, args: list[str], code: int, command: str = "build"
) -> int:
    """Up to `policy.attempts` rounds of `command` (the run's own dbt command) with the delay
    between them; returns the last exit code."""
    for round_ in range(1, policy.attempts + 1):
        if code == 0:
            break
        redo, kept = to_redo(attempt.results.nodes.values(), attempt.artifact("manifest.json"))
        if not redo:
            await attempt.log(
                f"jetdbt: node retry stops: nothing errored or skipped to redo;"
                f" data tests that failed their assertion are not retried: {kept}"
            )
            break
        if policy.delay_seconds:
            await attempt.pause(policy.delay_seconds)
        await attempt.log(
            f"jetdbt: node retry round {round_}/{policy.attempts}: rebuilding {', '.join(redo)}"
        )
        if kept:
            await attempt.log(
                "jetdbt: not retrying data tests that failed their assertion"
                f" (deterministic) unless a model they test is rebuilt: {kept}"
            )
        rebuild = attempt.prepared.dbt(command, [*args, *option("--select", *redo)])
        code = await attempt.invoke(rebuild, round_)
    return code

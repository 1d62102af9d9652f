"""Environment state: what a deferring run reads, and what a full successful build publishes.

The state is read by last-message-by-subject from the event stream (never from
Postgres) and its blobs from the object store. The directory is handed to dbt
RELATIVE to the project: dbt records its flags into run_results.json, and an
absolute path would name a job directory that is gone by the time anyone reads it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.setup.job_setup import Prepared
from jetdbt.services.runner.setup.plan import Plan
from jetdbt.services.runner.setup.selectors import selection_methods
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.project.environments import NO_STATE
from jetdbt.shared.runs import run_status

__all__ = ["STATE_DIR", "DeferRefused", "load", "defer_args", "publishes", "publish"]

STATE_DIR = "jetdbt_state"


class DeferRefused(ValueError):
    pass


async def load(ctx: RunnerContext, project: str, prepared: Prepared) -> ev.StatePublished:
    """The environment's state, written into the job for dbt; refused when it cannot answer."""
    plan = prepared.plan
    home = plan.defers_to()
    if home is None:
        raise DeferRefused(
            f"defer is refused: {plan.unlocated}; a deferral would resolve unbuilt"
            " refs through another location's manifest"
        )
    where = home.describe()
    state = await ctx.bus.last_event(subjects.state_event(project, home.key(), "published"))
    if not isinstance(state, ev.StatePublished):
        raise DeferRefused(
            f"defer is refused: {NO_STATE} for project {project!r} in {where}."
            " A successful build publishes it when it does not defer, is not a retry, and keeps"
            " the project's own graph (no vars/select/full_refresh override, no dynamic"
            " descriptor): run one first, or run without deferring (--no-defer,"
            ' "defer": false)'
        )
    if "result" in selection_methods(plan.select + plan.exclude) and not state.run_results_digest:
        raise DeferRefused(
            f"a result: selector needs run results, but the state of {where} was published by"
            f" run {state.run_id!r}, a build recovered by node retry, which publishes its"
            " manifest alone; select without result: or publish a state with a full build"
        )
    folder = prepared.job.project / STATE_DIR
    folder.mkdir(exist_ok=True)
    (folder / "manifest.json").write_bytes(await ctx.bus.get_blob(state.manifest_digest))
    if state.run_results_digest:
        (folder / "run_results.json").write_bytes(await ctx.bus.get_blob(state.run_results_digest))
    return state


def defer_args(plan: Plan) -> list[str]:
    """--defer-state for deferral alone, so a later `dbt retry` never reads it as its --state;
    --state only when the selection itself compares against the state."""
    args = ["--defer", "--defer-state", STATE_DIR]
    if plan.compares_state():
        args += ["--state", STATE_DIR]
    return args


def publishes(plan: Plan) -> bool:
    """The same condition as graph ownership, plus: never a deferring run, never one that
    builds into a scratch schema, never unlocated."""
    return (
        plan.publishes_ownership()
        and not plan.defer
        and plan.scratch_schema is None
        and plan.environment is not None
    )


async def publish(
    bus: Bus,
    plan: Plan,
    result: ev.RunResult,
    *,
    project: str,
    run_id: str,
    version: str,
    manifest: Path | None,
    run_results: dict | None,
    recovered: bool,
) -> None:
    """A passed build publishes its manifest, and its run results unless node retry
    `recovered` it (those describe the retried slice, not the build)."""
    if result.status != run_status.PASSED or not publishes(plan):
        return
    if manifest is None or not manifest.exists():
        return
    data = await asyncio.to_thread(manifest.read_bytes)
    # The two blobs are stored together: after the last node, every store is waited for.
    stored = [bus.put_blob(data)]
    if not recovered and run_results is not None:
        stored.append(bus.put_blob(msgspec.json.encode(run_results)))
    manifest_digest, *results_digest = await asyncio.gather(*stored)
    await bus.publish(
        ev.StatePublished(
            project=project,
            environment=plan.environment,
            run_id=run_id,
            version=version,
            manifest_digest=manifest_digest,
            manifest_size=len(data),
            run_results_digest=results_digest[0] if results_digest else None,
        )
    )

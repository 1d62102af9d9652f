"""A build run: one `dbt build` in a fresh job directory, node events published as they happen."""

from __future__ import annotations

import asyncio

import msgspec

from services.runner import engine, results, workspace
from services.runner.context import RunnerContext
from services.runner.dbt_process import DbtInvocation, dbt_env
from services.runner.warehouses import pick, render_profiles
from shared import events as ev
from shared import logging as jlog
from shared import subjects
from shared.commands import BuildCommand, RunCommand
from shared.outcomes import totals

__all__ = ["build", "build_args"]

ERROR_TAIL = 20


def build_args(cmd: BuildCommand, target: str) -> list[str]:
    """dbt's own flags for the command block; selection passes verbatim."""
    args = ["--target", target]
    if cmd.select:
        args += ["--select", *cmd.select]
    if cmd.exclude:
        args += ["--exclude", *cmd.exclude]
    if cmd.vars:
        args += ["--vars", msgspec.json.encode(cmd.vars).decode()]
    if cmd.full_refresh:
        args.append("--full-refresh")
    return args


class _Live:
    """Publishes node events and log lines while dbt runs, in the order dbt reports them."""

    def __init__(self, ctx: RunnerContext, project: str, run_id: str, attempt: int):
        self.ctx, self.project, self.run_id, self.attempt = ctx, project, run_id, attempt
        self.finished: dict[str, ev.NodeResult] = {}
        self.log_subject = subjects.run_log(run_id)

    async def on_line(self, line: str) -> None:
        await self.ctx.bus.nc.publish(self.log_subject, line.encode())

    async def on_event(self, record: dict) -> None:
        start = results.node_start(record)
        if start is not None:
            await self.ctx.bus.publish(
                ev.NodeStarted(
                    project=self.project,
                    run_id=self.run_id,
                    attempt=self.attempt,
                    unique_id=start.unique_id,
                    resource_type=start.resource_type,
                    name=start.name,
                    relation=start.relation,
                    started_at=start.started_at,
                )
            )
            return
        node = results.node_finished(record)
        if node is not None:
            self.finished[node.unique_id] = node
            await self.ctx.bus.publish(
                ev.NodeFinished(
                    project=self.project,
                    run_id=self.run_id,
                    attempt=self.attempt,
                    node=node,
                )
            )


async def build(
    ctx: RunnerContext,
    project: str,
    body: RunCommand,
    run_id: str,
    attempt: int,
    deployed: ev.Deployed,
    cancelled: asyncio.Event,
) -> ev.RunFinished:
    """Run the build to its end and publish RunFinished (also when dbt could not start)."""
    log = jlog.get("runner", project=project, run_id=run_id, attempt=attempt)
    cmd = body.command
    wh = pick(ctx.warehouses, "main")
    await ctx.bus.publish(
        ev.RunStarted(
            project=project,
            run_id=run_id,
            attempt=attempt,
            version=deployed.version,
            runner=ctx.name,
        )
    )
    job = await workspace.prepare(
        ctx.bus,
        ctx.settings.runner_cache,
        deployed.version,
        f"{run_id}.{attempt}",
        deployed.packages_digest,
    )
    live = _Live(ctx, project, run_id, attempt)
    try:
        profile = workspace.profile_name(job.project)
        (job.profiles / "profiles.yml").write_text(render_profiles(profile, wh))
        invocation = DbtInvocation(
            "build", build_args(cmd, wh.target), job.project, job.profiles, dbt_env()
        )
        log.info("dbt_started", argv=invocation.argv[3:])
        run = asyncio.create_task(
            invocation.run(live.on_line, live.on_event, ctx.settings.run_timeout_seconds)
        )
        stop = asyncio.create_task(cancelled.wait())
        await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        error = None
        if run.done():
            stop.cancel()
            try:
                code = run.result()
            except TimeoutError:
                code, error = -1, f"timed out after {ctx.settings.run_timeout_seconds}s"
        else:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            code, error = -1, "cancelled"
        nodes = _nodes(job, live)
        status = "cancelled" if error == "cancelled" else ("passed" if code == 0 else "failed")
        if status == "failed" and error is None and not any(n.outcome == "failed" for n in nodes):
            error = "\n".join(invocation.lines[-ERROR_TAIL:])
        result = ev.RunResult(
            status=status,
            engine=engine.ENGINE,
            engine_version=engine.engine_version(),
            command="build",
            totals=totals(n.outcome for n in nodes),
            nodes=nodes,
            exit_code=code,
            invocation_args=msgspec.to_builtins(cmd),
            warehouse=wh.name,
            target=wh.target,
            error=error,
        )
        log.info("dbt_finished", status=status, exit_code=code, nodes=len(nodes))
    finally:
        job.cleanup()
    finished = ev.RunFinished(project=project, run_id=run_id, attempt=attempt, result=result)
    await ctx.bus.publish(finished)
    return finished


def _nodes(job: workspace.Job, live: _Live) -> list[ev.NodeResult]:
    """run_results.json when dbt wrote it; what the live log saw otherwise."""
    target = job.project / "target"
    run_results = results.read_json(target / "run_results.json")
    if run_results is None:
        return list(live.finished.values())
    return results.from_artifacts(run_results, results.read_json(target / "manifest.json"))

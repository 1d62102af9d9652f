"""Deploy: accept the bundle, `dbt deps` when the project has packages, `dbt parse`, publish.

The bundle digest is the version. Deploying the version that is already the
latest is a no-op that says so.
"""

from __future__ import annotations

from services.runner import engine, workspace
from services.runner.context import RunnerContext
from services.runner.dbt_process import DbtInvocation, dbt_env
from services.runner.warehouses import pick, render_profiles
from shared import bundle, subjects
from shared import events as ev
from shared.commands import DeployCommand

__all__ = ["deploy"]

LOG_TAIL = 30


def _tail(lines: list[str]) -> str:
    return "\n".join(lines[-LOG_TAIL:])


async def deploy(ctx: RunnerContext, project: str, cmd: DeployCommand, deploy_id: str) -> ev.Event:
    """Run one deploy to its end; returns the final event it published."""
    bus = ctx.bus
    await bus.publish(
        ev.DeployRequested(
            project=project,
            deploy_id=deploy_id,
            bundle_digest=cmd.bundle_digest,
            bundle_size=cmd.bundle_size,
            requested_by=cmd.requested_by,
        )
    )
    latest = await bus.last_event(subjects.deploy_event(project, "deployed"))
    if isinstance(latest, ev.Deployed) and latest.version == cmd.bundle_digest:
        final = ev.DeployUnchanged(project=project, deploy_id=deploy_id, version=cmd.bundle_digest)
        await bus.publish(final)
        return final
    try:
        job = await workspace.prepare(
            bus, ctx.settings.runner_cache, cmd.bundle_digest, f"deploy-{deploy_id}"
        )
    except bundle.BundleRefused as exc:
        final = ev.DeployRefused(project=project, deploy_id=deploy_id, reason=str(exc))
        await bus.publish(final)
        return final
    try:
        return await _parse(ctx, project, cmd, deploy_id, job)
    finally:
        job.cleanup()


async def _fail(ctx, project, deploy_id, version, reason) -> ev.Event:
    final = ev.DeployFailed(project=project, deploy_id=deploy_id, version=version, reason=reason)
    await ctx.bus.publish(final)
    return final


async def _parse(
    ctx: RunnerContext, project: str, cmd: DeployCommand, deploy_id: str, job: workspace.Job
) -> ev.Event:
    version = cmd.bundle_digest
    files = job.files()
    try:
        wh = pick(ctx.warehouses, "main")
        profile = workspace.profile_name(job.project)
    except (LookupError, ValueError, OSError) as exc:
        return await _fail(ctx, project, deploy_id, version, str(exc))
    (job.profiles / "profiles.yml").write_text(render_profiles(profile, wh))
    env = dbt_env()
    packages_digest = None
    if any((job.project / name).exists() for name in workspace.PACKAGE_FILES):
        deps = DbtInvocation("deps", [], job.project, job.profiles, env)
        if await deps.run(timeout=ctx.settings.run_timeout_seconds) != 0:
            return await _fail(
                ctx, project, deploy_id, version, "dbt deps failed:\n" + _tail(deps.lines)
            )
        packed = workspace.pack_packages(job.project)
        packages_digest = await ctx.bus.put_blob(packed) if packed else None
    parse = DbtInvocation("parse", ["--target", wh.target], job.project, job.profiles, env)
    if await parse.run(timeout=ctx.settings.run_timeout_seconds) != 0:
        return await _fail(
            ctx, project, deploy_id, version, "dbt parse failed:\n" + _tail(parse.lines)
        )
    manifest = (parse.target_dir / "manifest.json").read_bytes()
    manifest_digest = await ctx.bus.put_blob(manifest)
    final = ev.Deployed(
        project=project,
        deploy_id=deploy_id,
        version=version,
        bundle_size=cmd.bundle_size,
        manifest_digest=manifest_digest,
        manifest_size=len(manifest),
        engine=engine.ENGINE,
        engine_version=engine.engine_version(),
        adapter=wh.adapter(),
        adapter_version=engine.adapter_version(wh.adapter()),
        files=files,
        skipped=cmd.skipped,
        requested_by=cmd.requested_by,
        packages_digest=packages_digest,
    )
    await ctx.bus.publish(final)
    return final

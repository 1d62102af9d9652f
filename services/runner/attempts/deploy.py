"""Deploy: accept the bundle, pin its packages (runner/provision/packages.py), `dbt parse`,
publish.

The bundle digest is the version. Deploying the version that is already the
latest is a no-op that says so. A descriptor, warehouse or engine problem
refuses the deploy with the reason, before any dbt runs.
"""

from __future__ import annotations

import asyncio
import shutil

from nats.js.errors import ObjectNotFoundError

from services.runner import graph
from services.runner.admission import admission
from services.runner.context import RunnerContext
from services.runner.process.containment import BoundExceeded
from services.runner.process.dbt_env import package_hub
from services.runner.provision import packages
from services.runner.setup.job_setup import Prepared, Refused, prepare
from shared import event_blobs, subjects
from shared import events as ev
from shared.commands import DeployCommand
from shared.digests import digest_of, short_digest

__all__ = ["deploy"]

LOG_TAIL = 30


async def deploy(
    ctx: RunnerContext,
    project: str,
    cmd: DeployCommand,
    deploy_id: str,
    *,
    team: str = "",
    door: str = "",
    seq: int = 0,
) -> ev.Event:
    """Run one deploy to its end; returns the final event it published. `cmd.requested_by`
    is the authenticated principal, `team` and `door` how it came in (the worker's), `seq`
    its command's place in the queues: a deploy's dbt takes a team slot and a run slot,
    and one deploy of a project at a time, in the order they were submitted."""
    bus = ctx.bus
    await bus.publish(
        ev.DeployRequested(
            project=project,
            deploy_id=deploy_id,
            bundle_digest=cmd.bundle_digest,
            bundle_size=cmd.bundle_size,
            requested_by=cmd.requested_by,
            team=team,
            door=door,
        )
    )
    latest = await bus.last_event(subjects.deploy_event(project, "deployed"))
    if isinstance(latest, ev.Deployed) and latest.version == cmd.bundle_digest:
        final = ev.DeployUnchanged(project=project, deploy_id=deploy_id, version=cmd.bundle_digest)
        await bus.publish(final)
        return final
    another = _another_source(project, latest, cmd)
    if another:
        final = ev.DeployRefused(project=project, deploy_id=deploy_id, reason=another)
        await bus.publish(final)
        return final
    holder = {"project": project, "run_id": f"deploy {deploy_id}", "runner": ctx.name}
    await admission.announce(bus, seq, team, holder)
    try:
        prepared = await prepare(
            ctx, cmd.bundle_digest, f"deploy-{deploy_id}", project=project, team=team
        )
    except Refused as exc:
        await admission.withdraw(bus, seq, team)
        final = ev.DeployRefused(project=project, deploy_id=deploy_id, reason=str(exc))
        await bus.publish(final)
        return final
    try:
        async with admission.admitted(
            ctx, scope=f"deploy {project}", team=team, seq=seq, holder=holder
        ):
            newer = await _submitted_later(bus, project, seq)
            if newer:
                final = ev.DeployRefused(project=project, deploy_id=deploy_id, reason=newer)
                await bus.publish(final)
                return final
            return await _parse(ctx, project, cmd, deploy_id, prepared, seq, team)
    except BoundExceeded as exc:
        final = ev.DeployFailed(
            project=project, deploy_id=deploy_id, version=cmd.bundle_digest, reason=str(exc)
        )
        await bus.publish(final)
        return final
    finally:
        await admission.withdraw(bus, seq, team)
        prepared.cleanup()


def _another_source(project: str, latest: ev.Event | None, cmd: DeployCommand) -> str | None:
    """Why a deploy from another folder than the current version's is refused, or None: the
    same folder or a clone of it shares a mark (services/cli/deploy_source.py), and a deploy
    that names no source, or asks to replace it, is not held to it."""
    if not isinstance(latest, ev.Deployed) or not latest.source or not cmd.source:
        return None
    if cmd.replace_source or set(latest.source) & set(cmd.source):
        return None
    return (
        f"project {project!r} (version {short_digest(latest.version)}) was deployed from"
        f" another folder ({', '.join(latest.source)}) than this one"
        f" ({', '.join(cmd.source)}): deploy this one under its own name"
        f" (jetdbt deploy PATH --project NAME), or make this folder the source of {project!r}"
        " on purpose (jetdbt deploy PATH --replace-source; replace_source: true in the command)"
    )


async def _submitted_later(bus, project: str, seq: int) -> str | None:
    """Why this deploy must not become the current version: a deploy submitted after it
    (a higher command sequence) is deployed already. Deploys of a project take its scope one
    at a time, so this holds until this one's version is published."""
    latest = await bus.last_event(subjects.deploy_event(project, "deployed"))
    if not isinstance(latest, ev.Deployed) or latest.command_seq <= seq:
        return None
    return (
        f"superseded: deploy {latest.deploy_id!r} of project {project!r}, submitted after this"
        f" one, is deployed already (version {short_digest(latest.version)}); the current"
        " version is the one submitted last, so this one changes nothing"
    )


async def _parse(
    ctx: RunnerContext,
    project: str,
    cmd: DeployCommand,
    deploy_id: str,
    prepared: Prepared,
    seq: int,
    team: str,
) -> ev.Event:
    job, plan = prepared.job, prepared.plan
    version = cmd.bundle_digest
    files = job.files()

    async def fail(reason: str) -> ev.Event:
        final = ev.DeployFailed(
            project=project,
            deploy_id=deploy_id,
            version=version,
            reason=reason,
        )
        await ctx.bus.publish(final)
        return final

    resolution = None
    if packages.declares_packages(job.project):
        try:
            resolution = await _pin_packages(ctx, prepared, team)
        except packages.PackagesRefused as exc:
            return await fail(str(exc))
    parse = prepared.dbt("parse", plan.common_args())
    if await parse.run(timeout=ctx.settings.run_timeout_seconds) != 0:
        return await fail("dbt parse failed:\n" + parse.error_tail(LOG_TAIL))
    manifest = await asyncio.to_thread(parse.artifact_path("manifest.json").read_bytes)
    # Storing the manifest and ingesting the graph from it need nothing of each other.
    manifest_digest, reason = await asyncio.gather(
        ctx.bus.put_blob(manifest),
        graph.ingest_version_graph(ctx, prepared, project, version, manifest, cmd.requested_by),
    )
    if reason:
        return await fail(reason)
    files, files_blob = await event_blobs.split(ctx.bus, files)
    final = ev.Deployed(
        project=project,
        deploy_id=deploy_id,
        version=version,
        bundle_size=cmd.bundle_size,
        manifest_digest=manifest_digest,
        manifest_size=len(manifest),
        engine=plan.engine,
        engine_version=prepared.engine_version,
        adapter=plan.adapter,
        adapter_version=prepared.adapter_version,
        files=files,
        skipped=cmd.skipped,
        skipped_count=cmd.skipped_count,
        requested_by=cmd.requested_by,
        packages_digest=resolution.blob if resolution else None,
        files_blob=files_blob,
        source=cmd.source,
        command_seq=seq,
        package_lock_digest=resolution.lock_digest if resolution else None,
        environment_lock=prepared.environment_lock,
        warehouse=prepared.descriptor.profile.warehouse_name(),
    )
    await ctx.bus.publish(final)
    return final


async def _pin_packages(
    ctx: RunnerContext, prepared: Prepared, team: str
) -> packages.Resolution | None:
    """The project's packages resolved once: this team's earlier resolution on this runner
    of the same package files and the committed lock it wrote, when there is one (no `dbt
    deps`), else `dbt deps` and its tree stored. Either way the job then parses the stored
    tree, as runs build it. None when deps installed nothing. Raises PackagesRefused naming
    why it failed."""
    project, where = prepared.job.project, prepared.plan.packages_path
    cache = prepared.packages
    files = packages.package_files(project, where)  # the version's, before deps runs
    hub = package_hub().get("DBT_PACKAGE_HUB_URL", "")  # the operator's: a project's is refused

    def key(lock: bytes | None) -> str:
        return packages.resolution_key(files, where, lock, team=team, hub=hub)

    known = cache.known(key(packages.lock_bytes(project)))
    if known is not None:
        try:
            prepared.use_packages(await cache.tree(ctx.bus, known.blob))
            return known
        except ObjectNotFoundError:  # the blob was reclaimed: resolve again
            pass
    shutil.rmtree(project / where, ignore_errors=True)  # only what dbt installs is used
    deps = prepared.deps()
    if await deps.run(timeout=ctx.settings.run_timeout_seconds) != 0:
        named = ", ".join(packages.declared(project)) or "none named"
        raise packages.PackagesRefused(
            f"dbt deps failed (packages: {named}):\n" + deps.error_tail(LOG_TAIL)
        )
    packed = await asyncio.to_thread(packages.pack, project, where)
    if packed is None:
        return None
    data, lock = packed
    resolution = packages.Resolution(
        blob=await ctx.bus.put_blob(data), lock_digest=digest_of(lock) if lock is not None else None
    )
    prepared.use_packages(await cache.tree(ctx.bus, resolution.blob))
    # Keyed by the lock dbt wrote (the one packed): a later deploy that commits that lock
    # resolves nothing; one without a lock (or with another) runs deps again, as dbt would.
    cache.remember(key(lock), resolution)
    return resolution

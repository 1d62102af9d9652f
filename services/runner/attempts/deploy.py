"""Deploy: accept the bundle, pin its packages (runner/provision/packages.py), `dbt parse`,
publish.

The bundle digest is the version. A deployed version runs nowhere by itself: the deploy
then promotes it (promotion.py) into the default environment, the one it names, a
person's own, or a pull request's slot, unless it promotes nowhere. Deploying the version
that is already the latest parses nothing and says so (promoting it where it is not yet).
A descriptor, environment, warehouse or engine problem refuses the deploy with the
reason, before any dbt runs.
"""

from __future__ import annotations

import asyncio
import shutil

from jetdbt.services.runner import graph
from jetdbt.services.runner.admission import admission
from jetdbt.services.runner.attempts import promotion
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.process.containment import BoundExceeded
from jetdbt.services.runner.process.dbt_env import package_hub
from jetdbt.services.runner.provision import packages
from jetdbt.services.runner.setup.job_setup import Prepared, Refused, prepare
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.blobs.digests import digest_of, short_digest
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import DeployCommand
from jetdbt.shared.project import slot_versions
from jetdbt.shared.project.descriptor import (
    DescriptorError,
    environment_names,
    personal_environments,
)
from jetdbt.shared.project.slot_versions import Slot, slot_for
from nats.js.errors import ObjectNotFoundError

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
    and one deploy of a slot at a time, in the order they were submitted."""
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
    found = await bus.last_stored(subjects.deploy_event(project, "deployed"))
    latest, latest_seq = found if found is not None else (None, 0)
    if isinstance(latest, ev.Deployed) and latest.version == cmd.bundle_digest:
        return await _unchanged(bus, project, cmd, deploy_id, seq, latest, latest_seq)
    holder = {"project": project, "run_id": f"deploy {deploy_id}", "runner": ctx.name}
    await admission.announce(bus, seq, team, holder)
    try:
        prepared = await prepare(
            ctx, cmd.bundle_digest, f"deploy-{deploy_id}", project=project, team=team
        )
    except Refused as exc:
        await admission.withdraw(bus, seq, team)
        return await _refuse(bus, project, deploy_id, str(exc))
    try:
        desc = prepared.as_declared
        environments = (environment_names(desc), personal_environments(desc))
        slot = _target(environments, cmd)
        refused = await _another_source(bus, project, slot, cmd)
        if refused:
            return await _refuse(bus, project, deploy_id, refused)
        async with admission.admitted(
            ctx, scope=f"deploy {project}", team=team, seq=seq, holder=holder
        ):
            newer = await _submitted_later(bus, project, slot, seq)
            if newer:
                return await _refuse(bus, project, deploy_id, newer)
            built = await _parse(ctx, project, cmd, deploy_id, prepared, seq, team, environments)
            if isinstance(built, str):
                return await _fail(bus, project, cmd, deploy_id, built)
            return await _publish(bus, project, cmd, slot, built)
    except DescriptorError as exc:
        return await _refuse(bus, project, deploy_id, str(exc))
    except BoundExceeded as exc:
        return await _fail(bus, project, cmd, deploy_id, str(exc))
    finally:
        await admission.withdraw(bus, seq, team)
        prepared.cleanup()


async def _refuse(bus, project: str, deploy_id: str, reason: str) -> ev.Event:
    final = ev.DeployRefused(project=project, deploy_id=deploy_id, reason=reason)
    await bus.publish(final)
    return final


async def _fail(bus, project: str, cmd: DeployCommand, deploy_id: str, reason: str) -> ev.Event:
    final = ev.DeployFailed(
        project=project, deploy_id=deploy_id, version=cmd.bundle_digest, reason=reason
    )
    await bus.publish(final)
    return final


def _target(environments: tuple[list[str], list[str]], cmd: DeployCommand) -> Slot | None:
    """The slot the deploy promotes its version into (None: none, `--no-promote`); raises
    DescriptorError for an environment the version does not have."""
    if not cmd.promote and not cmd.pr:
        if cmd.environment:
            slot_for(environments, cmd.environment, cmd.requested_by)  # checked all the same
        return None
    return slot_for(environments, cmd.environment, cmd.requested_by, cmd.pr)


async def _unchanged(
    bus,
    project: str,
    cmd: DeployCommand,
    deploy_id: str,
    seq: int,
    deployed: ev.Deployed,
    deployed_seq: int,
) -> ev.Event:
    """The version deployed last deployed again: no parse, no second Deployed; promoted into
    the target slot when that slot does not hold it yet."""
    try:
        slot = _target(slot_versions.environments_of(deployed), cmd)
    except DescriptorError as exc:
        return await _refuse(bus, project, deploy_id, str(exc))
    if slot is not None:
        await promotion.move(
            bus,
            project,
            slot,
            deployed,
            deployed_seq,
            requested_by=cmd.requested_by,
            command_seq=seq,
            deploy_id=deploy_id,
            superseded=False,
        )
    final = ev.DeployUnchanged(project=project, deploy_id=deploy_id, version=cmd.bundle_digest)
    await bus.publish(final)
    return final


async def _publish(
    bus, project: str, cmd: DeployCommand, slot: Slot | None, built: ev.Deployed
) -> ev.Event:
    """Publish the version (current nowhere by itself), then its promotion into `slot`. An
    old log's default version is promoted as an event first: the new Deployed event ends
    the fallback that read it (shared/slot_versions.py)."""
    await promotion.keep_default(bus, project)
    ack = await bus.publish(built)
    if slot is not None:
        await promotion.move(
            bus,
            project,
            slot,
            built,
            ack.seq,
            requested_by=cmd.requested_by,
            command_seq=built.command_seq,
            deploy_id=built.deploy_id,
            superseded=False,  # checked under the deploy scope (_submitted_later)
        )
    return built


async def _another_source(bus, project: str, slot: Slot | None, cmd: DeployCommand) -> str | None:
    """Why a deploy from another folder than the version its slot runs came from is refused,
    or None: the same folder or a clone of it shares a mark (services/cli/deploy_source.py),
    and a deploy that names no source, asks to replace it, or promotes nothing, is not held
    to it."""
    if slot is None or not cmd.source or cmd.replace_source:
        return None
    held = await slot_versions.held_by(bus, project, slot.name())
    if held is None or not held.source or set(held.source) & set(cmd.source):
        return None
    return (
        f"project {project!r} (version {short_digest(held.version)} in {slot.name()}) was"
        f" deployed from another folder ({', '.join(held.source)}) than this one"
        f" ({', '.join(cmd.source)}): deploy this one under its own name"
        f" (jetdbt deploy PATH --project NAME), or make this folder the source of {project!r}"
        " on purpose (jetdbt deploy PATH --replace-source; replace_source: true in the command)"
    )


async def _submitted_later(bus, project: str, slot: Slot | None, seq: int) -> str | None:
    """Why this deploy must not promote its version: a deploy (or a promotion) of its slot
    submitted after it (a higher command sequence) is promoted already. Deploys of a project
    take its scope one at a time, so this holds until this one's version is published; a
    deploy that promotes nothing supersedes nothing and is superseded by nothing."""
    if slot is None:
        return None
    latest = await slot_versions.promotion_of(bus, project, slot.name())
    if latest is None or latest.command_seq <= seq:
        return None
    by = f"deploy {latest.deploy_id!r}" if latest.deploy_id else "a promotion"
    return (
        f"superseded: {by} of project {project!r} into {slot.name()}, submitted after this"
        f" one, is promoted already (version {short_digest(latest.version)}); a slot runs"
        " the version submitted last, so this one changes nothing"
    )


async def _parse(
    ctx: RunnerContext,
    project: str,
    cmd: DeployCommand,
    deploy_id: str,
    prepared: Prepared,
    seq: int,
    team: str,
    environments: tuple[list[str], list[str]],
) -> ev.Deployed | str:
    """The version parsed (not yet published), or why it failed."""
    job, plan = prepared.job, prepared.plan
    version = cmd.bundle_digest
    files = await asyncio.to_thread(job.files)  # 5,000 stats at 5,000 models: off the loop

    resolution = None
    if packages.declares_packages(job.project):
        try:
            resolution = await _pin_packages(ctx, prepared, team)
        except packages.PackagesRefused as exc:
            return str(exc)
    parse = prepared.dbt("parse", plan.common_args())
    if await parse.run(timeout=ctx.settings.run_timeout_seconds) != 0:
        return "dbt parse failed:\n" + parse.error_tail(LOG_TAIL)
    manifest = await asyncio.to_thread(parse.artifact_path("manifest.json").read_bytes)
    # Storing the manifest and ingesting the graph from it need nothing of each other.
    manifest_digest, reason = await asyncio.gather(
        ctx.bus.put_blob(manifest),
        graph.ingest_version_graph(ctx, prepared, project, version, manifest, cmd.requested_by),
    )
    if reason:
        return reason
    files, files_blob = await event_blobs.split(ctx.bus, files)
    return ev.Deployed(
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
        current=False,
        pr=cmd.pr,
        environments=environments[0],
        personal_environments=environments[1],
    )


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

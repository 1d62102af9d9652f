"""Everything a dbt invocation needs before it starts, shared by deploys and runs.

Materialise the version, read its descriptor, pick the warehouse (one granted to the
project's team) and engine, plan the invocation and write profiles.yml. Any reason the job
cannot start becomes one `Refused` whose message names the cause.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.process.containment import JobSandbox, SandboxMissing
from jetdbt.services.runner.process.dbt_env import dbt_env, package_hub
from jetdbt.services.runner.process.dbt_process import DbtInvocation
from jetdbt.services.runner.process.job_disk import DiskUnavailable
from jetdbt.services.runner.provision import engine, environments
from jetdbt.services.runner.provision.packages import PackageCache, PackagesRefused, declared
from jetdbt.services.runner.setup import own_database, placement, run_credentials, workspace
from jetdbt.services.runner.setup.plan import Plan, PlanRefused, make_plan
from jetdbt.services.runner.setup.secrets import Resolver, UnresolvedReference
from jetdbt.services.runner.setup.warehouses import UnknownWarehouse, pick
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.bus.commands import DbtCommand
from jetdbt.shared.bus.streams import BLOBS
from jetdbt.shared.identity import warehouse_grants
from jetdbt.shared.project import bundle, descriptor
from jetdbt.shared.wording.short_quote import quote
from nats.js.errors import ObjectNotFoundError

__all__ = ["Prepared", "Refused", "prepare"]


class Refused(ValueError):
    pass


_REFUSALS = (
    bundle.BundleRefused,
    descriptor.DescriptorError,
    UnknownWarehouse,
    warehouse_grants.NotGranted,
    UnresolvedReference,
    engine.EngineUnavailable,
    environments.EnvironmentUnavailable,
    PlanRefused,
    ValueError,
)


# dbt's partial-parse file: kept per runner for each version, engine, profile, vars
# and target, and copied into every job of the same, so an unchanged version is not
# parsed again; dbt itself checks that the file still fits and parses fully if not.
PARTIAL_PARSE = "partial_parse.msgpack"


# deps' git: no system config, this file as its only global one, no prompt, and no protocol
# that runs a command (ext::, fd::). The sandbox's uid owns no repository on the machine,
# so git would refuse a file:// package repository an operator shows the sandbox
# (JETDBT_SANDBOX_READ) as of "dubious ownership": exactly those the project names are
# trusted. In the job's own HOME: git hands no -c setting to the process that reads a
# local repository.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ALLOW_PROTOCOL": "https:http:ssh:git:file",
}


def _git_config(repositories: list[str]) -> str:
    trusted = "".join(f"\tdirectory = {path}\n" for path in repositories)
    return f'[protocol "ext"]\n\tallow = never\n[safe]\n{trusted}'


@dataclass
class Prepared:
    job: workspace.Job
    descriptor: descriptor.Descriptor  # the run's environment's (placement.place)
    plan: Plan
    resolver: Resolver
    executable: list[str] | None
    env: dict[str, str]
    partial_parse: Path
    packages: PackageCache
    sandbox: JobSandbox | None = None
    environment: environments.EngineEnvironment | None = None  # None: jetdbt's own
    # The descriptor as the version declares it, every environment in it: what a deploy
    # records of the version (its environments), where `descriptor` is one environment's.
    as_declared: descriptor.Descriptor = descriptor.Descriptor()
    login: run_credentials.Login | None = None  # the run's own, on a per_run warehouse

    def cleanup(self) -> None:
        """Keep what dbt parsed for the next job of the same kind, then remove this job."""
        made = self.job.project / "target" / PARTIAL_PARSE
        if made.exists() and not self.partial_parse.exists():
            self.partial_parse.parent.mkdir(parents=True, exist_ok=True)
            (self.partial_parse.parent / "root").write_text(str(self.job.root))
            staging = self.partial_parse.with_name(f".{uuid.uuid4().hex}")
            shutil.copyfile(made, staging)
            os.replace(staging, self.partial_parse)
        self.job.cleanup()

    def dbt(self, command: str, args: list[str], **kw) -> DbtInvocation:
        """A dbt invocation in this job, with its profile, environment and engine. The
        profile (the warehouse's credentials) is written for the first of them: `dbt deps`,
        which needs none and has the machine's network, runs before it exists."""
        profile = self.job.profiles / "profiles.yml"
        if not profile.exists():
            profile.write_text(self._profile_text())
        return DbtInvocation(
            command,
            args,
            self.job.project,
            self.job.profiles,
            self.env,
            executable=self.executable,
            sandbox=self.sandbox,
            environment=self.environment,
            **kw,
        )

    def _profile_text(self) -> str:
        if self.login is None:
            return self.plan.profiles_text
        return run_credentials.into_profile(self.plan, self.login)

    def use_login(self, login: run_credentials.Login) -> None:
        """The run's own credential in the profile every later invocation reads."""
        self.login = login
        self.job.profiles.mkdir(parents=True, exist_ok=True)
        (self.job.profiles / "profiles.yml").write_text(self._profile_text())

    def deps(self) -> DbtInvocation:
        """`dbt deps` in this job: the network it fetches packages over, git locked down."""
        home = self.job.root / "home"
        home.mkdir(exist_ok=True)
        named = declared(self.job.project)
        local = [u[7:] for u in named if u.startswith("file:///") and u.isprintable()]
        config = home / ".gitconfig"
        config.write_text(_git_config(local))
        return DbtInvocation(
            "deps",
            [],
            self.job.project,
            self.job.profiles,
            {**self.env, **package_hub(), **_GIT_ENV, "GIT_CONFIG_GLOBAL": str(config)},
            executable=self.executable,
            sandbox=self.sandbox.for_deps() if self.sandbox else None,
            environment=self.environment,
        )

    def use_packages(self, tree: Path) -> None:
        """Package tree `tree` linked into the job, and readable (only) in its sandbox."""
        PackageCache.link(tree, self.job.project, self.plan.packages_path)
        if self.sandbox is not None:
            self.sandbox.readonly.append(str(tree))

    @property
    def engine_version(self) -> str:
        if self.environment is not None:
            return self.environment.version("dbt-core")
        return engine.version(self.plan.engine, self.executable)

    @property
    def adapter_version(self) -> str:
        if self.environment is not None:
            return self.environment.version(f"dbt-{self.plan.adapter}")
        return engine.adapter_version(self.plan.adapter)

    @property
    def environment_lock(self) -> dict[str, str]:
        """Every package of the engine environment at its exact version ({}: jetdbt's own)."""
        return dict(self.environment.lock) if self.environment is not None else {}

    @property
    def profile_digest(self) -> str:
        """Moves when the connection moves (or a password rotates); never reveals it."""
        return digest_of(self.plan.profiles_text.encode())


def _reuse_partial_parse(cached: Path, job: workspace.Job) -> None:
    """The cached file with its job's paths swapped for this job's (same length)."""
    try:
        old = (cached.parent / "root").read_text().encode()
        data = cached.read_bytes()
    except OSError:
        return
    new = str(job.root).encode()
    if len(old) != len(new):
        return
    (job.project / "target").mkdir(exist_ok=True)
    (job.project / "target" / PARTIAL_PARSE).write_bytes(data.replace(old, new))


async def prepare(
    ctx: RunnerContext,
    version: str,
    name: str,
    *,
    project: str,
    team: str,
    packages_digest: str | None = None,
    cmd: DbtCommand | None = None,
    args: dict[str, Any] | None = None,
    where: placement.Placement | None = None,
) -> Prepared:
    """The job `name` of `project`'s `version`, ready for dbt, or Refused naming why. `team` is
    the project's: the warehouse its descriptor names must be granted to it. `where` is the
    environment a run names (None: a deploy's, the default one), whose descriptor it plans
    with."""
    try:
        await ctx.containment.check()
    except SandboxMissing as exc:
        raise Refused(str(exc)) from None
    try:
        disk = ctx.containment.disk if ctx.containment.enabled else None
        job = await workspace.prepare(ctx.bus, ctx.settings.runner_cache, version, name, disk)
    except bundle.BundleRefused as exc:
        raise Refused(str(exc)) from None
    except ObjectNotFoundError:
        raise Refused(
            f"version {version} is missing from the object store {BLOBS}: deploy the project again"
        ) from None
    except (ValueError, tarfile.TarError) as exc:  # a digest mismatch, a torn archive
        raise Refused(f"version {version} cannot be materialised: {quote(str(exc), 200)}") from None
    except DiskUnavailable as exc:
        raise Refused(f"the job's folder cannot be made: {exc}") from None
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise Refused(f"version {version} does not fit: {ctx.containment.disk_error()}") from None
    try:
        as_declared = descriptor.load(job.project)
        placed = placement.place(as_declared, where)
        desc = placed.desc
        wh = pick(ctx.warehouses, desc.profile.warehouse_name())
        warehouse_grants.check(wh.name, team, wh.teams)
        engine_name = desc.engine or ctx.settings.default_engine
        executable = engine.command(engine_name, ctx.settings.engines_dir)
        resolver = ctx.resolver()
        plan = make_plan(
            desc, cmd, args, wh, resolver, job.project, engine_name,
            project=project, home_desc=placed.home, scratch_for=placed.scratch,
        )  # fmt: skip
        await asyncio.to_thread(own_database.check_job, plan.place, ctx.own_database)
        if desc.profile.profiles_yml:
            await asyncio.to_thread(own_database.check_own_profile, plan.place, wh, resolver)
        ctx.containment.check_writable(plan)
        # An engine binary carries its adapters; the installed dbt-core needs one for it.
        environment = None
        if executable is None and plan.adapter:
            environment = await environments.ensure(ctx.settings, plan.adapter)
    except _REFUSALS as exc:
        job.cleanup()
        raise Refused(str(exc)) from None
    prepared = Prepared(
        job=job,
        descriptor=desc,
        as_declared=as_declared,
        plan=plan,
        resolver=resolver,
        executable=executable,
        env=dbt_env(plan.env),
        partial_parse=_partial_parse(ctx, version, environment, executable, plan),
        packages=PackageCache(ctx.settings.runner_cache / "packages"),
        sandbox=(
            JobSandbox(ctx.containment, job.root, plan, labels={"project": project, "job": name})
            if ctx.containment.enabled
            else None
        ),
        environment=environment,
    )
    if prepared.sandbox is not None and environment is not None:
        prepared.sandbox.readonly.append(environment.root)
    if packages_digest:
        await _restore_packages(ctx, prepared, packages_digest)
    if prepared.partial_parse.exists():
        _reuse_partial_parse(prepared.partial_parse, job)
    return prepared


async def _restore_packages(ctx: RunnerContext, prepared: Prepared, blob: str) -> None:
    """The version's pinned package tree, from this runner's cache or the object store;
    a run never resolves packages itself."""
    try:
        prepared.use_packages(await prepared.packages.tree(ctx.bus, blob))
    except ObjectNotFoundError:
        prepared.job.cleanup()
        raise Refused(
            f"the version's packages {blob} are missing from the object store {BLOBS}:"
            " deploy the project again"
        ) from None
    except (PackagesRefused, ValueError, tarfile.TarError) as exc:
        prepared.job.cleanup()
        reason = quote(str(exc), 200)
        raise Refused(f"the version's packages cannot be restored: {reason}") from None


def _partial_parse(ctx: RunnerContext, version: str, environment, executable, plan: Plan) -> Path:
    core = environment.root if environment else engine.version(plan.engine, executable)
    key = msgspec.json.encode([version, core, plan.profiles_text, plan.vars, plan.target])
    return ctx.settings.runner_cache / "partial-parse" / digest_of(key)[7:] / PARTIAL_PARSE

"""Everything a dbt invocation needs before it starts, shared by deploys and runs.

Materialise the version, read its descriptor, pick the warehouse and engine,
plan the invocation and write profiles.yml. Any reason the job cannot start
becomes one `Refused` whose message names the cause.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from typing import Any

from nats.js.errors import ObjectNotFoundError

from services.runner import engine, workspace
from services.runner.context import RunnerContext
from services.runner.dbt_process import DbtInvocation, dbt_env
from services.runner.plan import Plan, PlanRefused, make_plan
from services.runner.secrets import Resolver, UnresolvedReference
from services.runner.warehouses import UnknownWarehouse, pick
from shared import bundle, descriptor
from shared.bus import BLOBS
from shared.commands import BuildCommand
from shared.digests import digest_of
from shared.quote import quote

__all__ = ["Prepared", "Refused", "prepare"]


class Refused(ValueError):
    pass


_REFUSALS = (
    bundle.BundleRefused,
    descriptor.DescriptorError,
    UnknownWarehouse,
    UnresolvedReference,
    engine.EngineUnavailable,
    PlanRefused,
    ValueError,
)


@dataclass
class Prepared:
    job: workspace.Job
    descriptor: descriptor.Descriptor
    plan: Plan
    resolver: Resolver
    executable: list[str] | None
    env: dict[str, str]

    def dbt(self, command: str, args: list[str], **kw) -> DbtInvocation:
        """A dbt invocation in this job, with its profile, environment and engine."""
        return DbtInvocation(
            command,
            args,
            self.job.project,
            self.job.profiles,
            self.env,
            executable=self.executable,
            **kw,
        )

    @property
    def engine_version(self) -> str:
        return engine.version(self.plan.engine, self.executable)

    @property
    def profile_digest(self) -> str:
        """Moves when the connection moves (or a password rotates); never reveals it."""
        return digest_of(self.plan.profiles_text.encode())


async def prepare(
    ctx: RunnerContext,
    version: str,
    name: str,
    *,
    packages_digest: str | None = None,
    cmd: BuildCommand | None = None,
    args: dict[str, Any] | None = None,
) -> Prepared:
    try:
        job = await workspace.prepare(
            ctx.bus, ctx.settings.runner_cache, version, name, packages_digest
        )
    except bundle.BundleRefused as exc:
        raise Refused(str(exc)) from None
    except ObjectNotFoundError:
        raise Refused(
            f"version {version} (or its packages) is missing from the object store"
            f" {BLOBS}: deploy the project again"
        ) from None
    except (ValueError, tarfile.TarError) as exc:  # a digest mismatch, a torn archive
        raise Refused(f"version {version} cannot be materialised: {quote(str(exc), 200)}") from None
    try:
        desc = descriptor.load(job.project)
        wh = pick(ctx.warehouses, desc.profile.warehouse)
        executable = engine.command(desc.engine, ctx.settings.engines_dir)
        resolver = ctx.resolver()
        plan = make_plan(desc, cmd, args, wh, resolver, job.project, desc.engine)
    except _REFUSALS as exc:
        job.cleanup()
        raise Refused(str(exc)) from None
    (job.profiles / "profiles.yml").write_text(plan.profiles_text)
    return Prepared(
        job=job,
        descriptor=desc,
        plan=plan,
        resolver=resolver,
        executable=executable,
        env=dbt_env(plan.env),
    )

"""The runner's command loop: a pull consumer shared by every runner replica.

A message is acked only once its run or deploy has published its final event. How
many runs build at once is admission's (services/runner/admission/admission.py): a run waits
for its slots in its handler, holding its command with in_progress(), so the
consumer's max_ack_pending caps only the commands held, not the runs.
Long runs heartbeat with in_progress(); a runner that dies is noticed by
redelivery, and the next attempt says the previous one was lost. A cancel command is
checked and recorded in the log (run.cancel_requested); every runner follows those facts,
and the one holding the run kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable

import msgspec
from jetdbt.services.runner.admission import admission
from jetdbt.services.runner.admission.lease import LeaseLost
from jetdbt.services.runner.admission.principal_rate import PrincipalRate
from jetdbt.services.runner.admission.runner_share import RunnerFull
from jetdbt.services.runner.attempts.attempt import Cancel
from jetdbt.services.runner.attempts.build import build
from jetdbt.services.runner.attempts.dbt_retry import retry
from jetdbt.services.runner.attempts.deploy import deploy
from jetdbt.services.runner.attempts.parse import parse
from jetdbt.services.runner.attempts.promote import promote
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.facts import jobs
from jetdbt.services.runner.process import spawn
from jetdbt.services.runner.process.containment import SandboxMissing
from jetdbt.services.runner.process.spawn import ForkServerLost
from jetdbt.services.runner.setup import run_credentials, workspace
from jetdbt.services.runner.setup.placement import Placement
from jetdbt.shared.bus import commands, subjects
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import TRANSIENT
from jetdbt.shared.bus.streams import COMMANDS
from jetdbt.shared.identity import principals
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from jetdbt.shared.project import descriptor, slot_versions, uploads
from jetdbt.shared.wording.short_quote import quote

__all__ = ["Runner", "CONSUMER"]

CONSUMER = "runners"
RETRY_DELAY = 5.0  # seconds before a command that met a NATS outage is tried again
LEASE_WAIT = 2.0  # seconds before a fenced attempt's command comes back
GIVE_BACK_WAIT = 1.0  # seconds before a command a full runner gave back comes back


class Runner:
    def __init__(self, ctx: RunnerContext):
        self.ctx = ctx
        self.log = jlog.get("runner", runner=ctx.name)
        self.active: dict[tuple[str, str], Cancel] = {}
        self.ack_wait = float(ctx.settings.run_ack_wait_seconds)
        # An external system's share of the never-purged log, per runner.
        self.rate = PrincipalRate(ctx.settings.external_publishes_per_minute)
        # Each command verb's handler, called with (msg, project, problem, seq, caller):
        # one per subjects.COMMAND_VERBS.
        self.handlers: dict[str, Callable[..., Awaitable[None]]] = {
            "run": self._run,
            "deploy": self._deploy,
            "cancel": self._check_cancel,
            "job": functools.partial(jobs.handle, ctx),
            "promote": functools.partial(promote, ctx.bus),
        }

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve commands until `stop`; a failed loop (NATS away) starts again a second
        later, and the runs already going are kept, not cancelled."""
        stop = stop or asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        spawn.warm_up()  # dbt imported and rehearsed before the first command asks for it
        # Run roles a dead runner left on a per_run warehouse, dropped once expired.
        swept = run_credentials.sweep_all(
            self.ctx.warehouses.values(), self.ctx.resolver(), self.log
        )
        self._tasks.add(asyncio.create_task(swept))
        async with admission.mirrored(self.ctx.bus, self.log):
            try:
                await supervise.forever(self._serve, stop, self.log, "runner_loop_failed")
            finally:
                # Inside the mirror: a run still being admitted must not find it gone, fail
                # and lose its command; cancelled, its command comes back to another runner.
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                await workspace.settled()
                await self.ctx.containment.close()

    async def _serve(self, stop: asyncio.Event) -> None:
        js = self.ctx.bus.js
        sub = await js.pull_subscribe_bind(CONSUMER, stream=COMMANDS)
        # The consumer's live ack wait, not this runner's setting: one owner for it.
        self.ack_wait = (await js.consumer_info(COMMANDS, CONSUMER)).config.ack_wait
        cancels = await self.ctx.bus.follow(subjects.CANCELS_REQUESTED, self._on_cancel)
        with contextlib.suppress(SandboxMissing):  # said on the start line; runs are refused
            await self.ctx.containment.check()
        self.log.info("runner_started", sandbox=self.ctx.containment.describe())
        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(1, timeout=0.5)
                except TimeoutError:
                    continue  # nothing waiting, or max_ack_pending commands held already
                task = asyncio.create_task(self._handle(msgs[0]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            with contextlib.suppress(Exception):
                await cancels.unsubscribe()

    async def _on_cancel(self, msg) -> None:
        """A cancel the log recorded (`_check_cancel` checked who asked, and for which
        project's run) reaches every runner; the one holding the run stops it."""
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            event = ev.decode(msg.data)
            if isinstance(event, ev.RunCancelRequested) and ev.fits(event, msg.subject):
                cancel = self.active.get((event.project, event.run_id))
                if cancel is not None:
                    cancel.request(event.requested_by)

    async def _heartbeat(self, msg) -> None:
        while True:
            # Four beats per ack wait: one lost beat never costs a live run its command,
            # and a beat that fails (NATS away) is tried again at the next one.
            await asyncio.sleep(self.ack_wait / 4)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    async def _handle(self, msg) -> None:
        beat = asyncio.create_task(self._heartbeat(msg))
        try:
            await self._dispatch(msg)
            settle = msg.ack
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            # Fenced: dbt was stopped and nothing final was said; a later attempt runs it.
            self.log.warning("attempt_fenced", subject=msg.subject, reason=str(exc))
            settle = functools.partial(msg.nak, delay=LEASE_WAIT)
        except RunnerFull as exc:
            # Its turn came while this runner builds its share: another runner may take it.
            self.log.info("command_given_back", subject=msg.subject, reason=str(exc))
            settle = functools.partial(msg.nak, delay=GIVE_BACK_WAIT)
        except (*TRANSIENT, ForkServerLost) as exc:
            # NATS was away before the run settled: it comes back, so does the command.
            self.log.warning("command_retried", subject=msg.subject, error=repr(exc))
            settle = functools.partial(msg.nak, delay=RETRY_DELAY)
        except Exception:
            # A bug here must not redeliver forever; the final event says what happened.
            self.log.exception("command_failed", subject=msg.subject)
            settle = msg.term
        finally:
            beat.cancel()
        with contextlib.suppress(Exception):
            await settle()

    async def _dispatch(self, msg) -> None:
        verb = subjects.command_verb(msg.subject)
        # Kept as written when it is not our encoding: check_project refuses it.
        raw_project = subjects.subject_key(msg.subject)
        try:
            subjects.check_project(raw_project)
            problem = None
        except subjects.InvalidName as exc:
            problem = str(exc)
        project = subjects.filed_under(raw_project)
        seq = msg.metadata.sequence.stream
        try:
            caller = await principals.caller_of(self.ctx.bus, msg.subject, msg.headers)
        except subjects.InvalidName as exc:
            caller = principals.Caller(principal=subjects.ANONYMOUS, team="", door="")
            problem = problem or str(exc)
        if caller.own_user:
            admitted = self.rate.admit(caller.principal)
            if admitted == "drop":
                self.log.warning("command_dropped", subject=msg.subject, principal=caller.principal)
                return
            if admitted == "refuse":
                reason = self.rate.reason(caller.principal)
                await self.ctx.bus.publish(
                    ev.DeployRefused(project=project, deploy_id=f"c{seq}", reason=reason)
                    if verb in ("deploy", "promote")
                    else ev.RunRefused(project=project, run_id=f"c{seq}", reason=reason)
                )
                return
        handler = self.handlers.get(verb)
        if handler is not None:
            await handler(msg, project, problem, seq, caller)
        else:
            await self.ctx.bus.publish(
                ev.RunRefused(
                    project=project or "unknown",
                    run_id=f"c{seq}",
                    reason=f"unknown command verb {quote(verb)} on {quote(msg.subject)};"
                    f" known: {', '.join(subjects.COMMAND_VERBS)}",
                )
            )

    async def _check_cancel(
        self, msg, project: str, problem: str | None, seq: int, caller: principals.Caller
    ) -> None:
        """Cancels act on the plain subscription; the stream keeps them for audits, and a
        malformed one is refused here, naming why."""
        try:
            body = commands.decode_cancel(msg.data)
            problem = problem or principals.claim_problem(body.requested_by, caller.principal)
        except commands.CommandRejected as exc:
            problem = problem or str(exc)
        problem = problem or await self._caller_problem(caller, "cancel", project)
        if problem is not None:
            await self.ctx.bus.publish(
                ev.RunRefused(project=project, run_id=f"c{seq}", reason=problem)
            )
            return
        await self._record_cancel(project, body.run_id, caller.principal, seq)

    async def _record_cancel(self, project: str, run_id: str, by: str, seq: int) -> None:
        """A cancel of a run of `project` (or of one not asked for yet) goes into the log, so
        it wins even before the run is delivered: admission reads it before the run starts."""
        owner = await self._owner(run_id)
        if owner is None or owner == project:
            await self.ctx.bus.publish(
                ev.RunCancelRequested(
                    project=project, run_id=run_id, requested_by=by, command_seq=seq
                )
            )

    async def _refuse_foreign(self, project: str, run_id: str, seq: int) -> None:
        """Refuse, under the command's own id, a run id another project owns."""
        await self.ctx.bus.publish(
            ev.RunRefused(
                project=project,
                run_id=f"c{seq}",
                reason=f"run id {run_id!r} belongs to another project; choose another run id",
            )
        )

    async def _owner_team(self, project: str) -> str:
        return await principals.project_team(self.ctx.bus, project)

    async def _caller_problem(
        self, caller: principals.Caller, verb: str, project: str
    ) -> str | None:
        """Why `caller` may not send a `verb` command for `project`, whose team is its
        first deployer's (principals.command_problem: one rule for both doors)."""
        return principals.command_problem(caller, verb, project, await self._owner_team(project))

    async def _owner(self, run_id: str) -> str | None:
        """The project that first asked for `run_id`, from the log: run ids are unique
        across projects, so a command never reaches another project's run."""
        first = await self.ctx.bus.last_event(
            subjects.run_event_of_any_project(run_id, "requested")
        )
        return first.project if first is not None else None

    async def _attempt_number(self, project: str, run_id: str) -> int:
        """This attempt's number, from the log: one past the last attempt that started.
        A delivery that only waited for a lease started nothing, so it is not an attempt."""
        started = await self.ctx.bus.last_event(subjects.run_event(project, run_id, "started"))
        return started.attempt + 1 if isinstance(started, ev.RunStarted) else 1

    async def _run(
        self, msg, project: str, problem: str | None, seq: int, caller: principals.Caller
    ) -> None:
        bus = self.ctx.bus
        try:
            body = commands.decode_run(msg.data)
            claimed = principals.claim_problem(body.requested_by, caller.principal)
        except commands.CommandRejected as exc:
            claimed = str(exc)
        claimed = claimed or await self._caller_problem(caller, "run", project)
        if claimed is not None:
            # Under the command's own id: a run id in a refused body names nobody's run.
            await bus.publish(ev.RunRefused(project=project, run_id=f"c{seq}", reason=claimed))
            return
        # From here on the principal is the authenticated one (retry state is keyed by it).
        trigger = _trigger(msg, project, body, caller)
        if trigger == "schedule" and await jobs.repeated_fire(bus, project, body, msg, seq):
            # The server fired a due time again (restarted from an older schedule state).
            self.log.info("schedule_fire_repeated", project=project, command_seq=seq)
            return
        if trigger == "schedule":
            joined = await jobs.coalesced(bus, project, body.command.name, msg, seq)
            if joined is not None:
                self.log.info("schedule_fire_coalesced", project=project, run_id=joined.run_id)
                await bus.publish(joined)
                return
        depth = body.depth if trigger in _CAUSED else 0
        body = msgspec.structs.replace(
            body, requested_by=caller.principal, trigger=trigger, depth=depth
        )
        job, role = "", principals.run_role(caller, project)
        if isinstance(body.command, commands.JobRun):
            job = body.command.name
            body, problem, cap = await _job_run(bus, msg, project, body, problem)
            role = principals.least_role(role, cap)
        problem = problem or _depth_problem(body)
        body = await _in_environment(bus, project, body)
        run_id = body.run_id or f"c{seq}"
        owner = await self._owner(run_id)
        if owner is not None and owner != project:
            await self._refuse_foreign(project, run_id, seq)
            return
        log = self.log.bind(project=project, run_id=run_id)
        if await bus.run_end(project, run_id) is not None:
            log.info("run_already_settled")
            return
        await bus.publish(
            ev.RunRequested(
                project=project,
                run_id=run_id,
                command=msgspec.to_builtins(body.command),
                requested_by=body.requested_by,
                requested_at=msg.metadata.timestamp,
                hidden=body.hidden,
                command_seq=seq,
                team=caller.team,
                door=caller.door,
                job=job,
                trigger=body.trigger,
                depth=body.depth,
                environment=body.environment,
                pr=body.pr,
            )
        )
        fire = jobs.fired(msg, project, job, run_id, seq) if job else None
        if fire is not None:
            await bus.publish(fire)
        if await self._owner(run_id) != project:
            # Another project asked for this run id at the same moment and was stored first
            # (a request's id names no project, so ours was dropped as its duplicate).
            await self._refuse_foreign(project, run_id, seq)
            return
        reason = problem
        deployed = None
        command = body.command
        needs_version = isinstance(command, commands.DbtCommand) or (
            isinstance(command, commands.ParseCommand) and not command.bundle_digest
        )
        if reason is None and needs_version:
            slot = await slot_versions.slot_for_run(
                bus, project, body.environment, body.requested_by, body.pr
            )
            deployed = await slot_versions.held_by(bus, project, slot)
            if deployed is None and isinstance(command, commands.ClosePrCommand):
                # A pull request never checked closes too: its environment's version plans it.
                environment = ev.promotion_slot(body.environment)
                deployed = await slot_versions.held_by(bus, project, environment)
            if deployed is None:
                reason = slot_versions.nothing_held(project, slot)
        if reason is not None:
            await bus.publish(ev.RunRefused(project=project, run_id=run_id, reason=reason))
            return
        attempt_number = await self._attempt_number(project, run_id)
        key = (project, run_id)
        cancelled = self.active.setdefault(key, Cancel())
        where = Placement(
            environment=body.environment,
            principal=body.requested_by,
            pr=body.pr,
            role=role,
        )
        started = (self.ctx, project, body, run_id, attempt_number)
        try:
            if isinstance(command, commands.RetryCommand):
                await retry(*started, cancelled, where)
            elif isinstance(command, commands.ParseCommand):
                await parse(*started, deployed, cancelled, where)
            else:
                await build(*started, deployed, cancelled, where)
        finally:
            self.active.pop(key, None)

    async def _deploy(
        self, msg, project: str, problem: str | None, seq: int, caller: principals.Caller
    ) -> None:
        bus = self.ctx.bus
        try:
            body = commands.decode_deploy(msg.data)
            problem = problem or principals.claim_problem(body.requested_by, caller.principal)
        except commands.CommandRejected as exc:
            problem = str(exc)
        team = ""
        if problem is None:
            owner = await self._owner_team(project)
            problem = principals.command_problem(caller, "deploy", project, owner)
            team, refused = principals.deploy_team(caller, project, owner)
            problem = problem or refused or await _upload_problem(bus, body)
        if problem is not None:
            await bus.publish(
                ev.DeployRefused(project=project, deploy_id=f"c{seq}", reason=problem)
            )
            return
        body = msgspec.structs.replace(body, requested_by=caller.principal)
        await deploy(self.ctx, project, body, body.deploy_id, team=team, door=caller.door, seq=seq)
        await uploads.forget(bus, body.deploy_id)


def _trigger(msg, project: str, body: commands.RunCommand, caller: principals.Caller) -> str:
    """What started the run, from what the server vouches for: a schedule's fire carries
    headers no client may set; the API and a system's own user are their doors. Only the
    operator's own processes (the CLI, the triggers service) say it themselves."""
    if jobs.is_fire(msg, project, body):
        return "schedule"
    if caller.via_api:
        return "api"
    if caller.own_user:
        return "nats"
    return body.trigger or "manual"


# The triggers a run's own cause started it by: only such a run has a depth in a chain.
_CAUSED = ("relation", "after")


def _depth_problem(body: commands.RunCommand) -> str | None:
    """Why a triggered run is too deep in its chain of causes to start (see MAX_TRIGGER_DEPTH)."""
    if body.depth <= commands.MAX_TRIGGER_DEPTH:
        return None
    return (
        f"trigger chain too deep: this {body.trigger} run would make {body.depth} triggered"
        f" runs in one chain of causes, past the limit of {commands.MAX_TRIGGER_DEPTH}: jobs"
        " wake each other in a cycle (a deploy made a project write a relation one of them"
        " reads); change or delete one of them (jetdbt job list)"
    )


async def _job_run(
    bus, msg, project: str, body: commands.RunCommand, problem: str | None
) -> tuple[commands.RunCommand, str | None, str]:
    """A job's run as the job is saved now: its command and run arguments (the command's
    own arguments over them), and the highest role it runs with (jobs.role_cap); a job that
    does not exist refuses the run."""
    name = body.command.name
    saved = await jobs.job_of(bus, project, name)
    least = principals.ROLES[0]
    if saved is None:
        return (
            body,
            problem
            or (f"project {project!r} has no job {name!r}: jetdbt job list --project {project}"),
            least,
        )
    try:
        spec = msgspec.convert(saved.spec, commands.JobSpec)
    except msgspec.ValidationError as exc:
        return body, problem or f"job {name!r} cannot be read: {quote(str(exc), 200)}", least
    cap = await jobs.role_cap(bus, msg, project, saved, body)
    return (
        msgspec.structs.replace(
            body,
            command=spec.command,
            args={**spec.args, **body.args},
            environment=spec.environment,
        ),
        problem,
        cap,
    )


async def _in_environment(bus, project: str, body: commands.RunCommand) -> commands.RunCommand:
    """The run with its environment named ("" is the default one) and its pull request: a
    retry resumes in the environment, and for the pull request, of the run it resumes."""
    environment, pr = body.environment, body.pr
    if isinstance(body.command, commands.RetryCommand):
        resumed = await bus.last_event(
            subjects.run_event(project, body.command.dbt_retry_job, "requested")
        )
        if isinstance(resumed, ev.RunRequested):
            environment, pr = resumed.environment, resumed.pr
    return msgspec.structs.replace(
        body, environment=environment or descriptor.DEFAULT_ENVIRONMENT, pr=pr
    )


async def _upload_problem(bus, body: commands.DeployCommand) -> str | None:
    """Why a deploy may not use the bundle it names: only the digest its own upload recorded
    (shared/project/uploads.py), never another version's that happens to be stored."""
    if not body.deploy_id:
        return "a deploy names its deploy_id, under which its upload recorded the bundle"
    found = await uploads.recorded(bus, body.deploy_id)
    if found == body.bundle_digest:
        return None
    if found is None:
        return (
            f"deploy {body.deploy_id!r} names bundle {body.bundle_digest} but uploaded none:"
            " a deploy uses only the bundle its own upload stored (jetdbt deploy PATH)"
        )
    return (
        f"deploy {body.deploy_id!r} names bundle {body.bundle_digest} but its upload stored"
        f" {quote(found[:80])}: a deploy uses only the bundle its own upload stored"
    )

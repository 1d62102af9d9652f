"""One run attempt's life, owned in one place: prepare, start, invoke, finish, clean up.

Build, parse and retry are each an `Attempt` that keeps only its own steps: what
it checks before starting, its dbt invocations, and what it adds to the result.
Everything else is done here once: the job is prepared and always cleaned up, a
check that fails refuses the run, RunStarted says which runner and version, node
events and log lines are published as dbt reports them, a cancel or a timeout
ends the run with that error, and the result is published last.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from jetdbt.services.runner.admission import admission, queue_cap
from jetdbt.services.runner.admission.admission import Admission, Blocked
from jetdbt.services.runner.admission.lease import Lease, LeaseLost
from jetdbt.services.runner.admission.queue_cap import Place, QueueFull
from jetdbt.services.runner.after import artifacts, kept_log, results, retention
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.process.containment import BoundExceeded
from jetdbt.services.runner.process.dbt_process import DbtInvocation, RunTimedOut
from jetdbt.services.runner.process.spawn import ForkServerLost
from jetdbt.services.runner.setup import run_credentials
from jetdbt.services.runner.setup.job_setup import Prepared, Refused, prepare
from jetdbt.services.runner.setup.placement import Placement
from jetdbt.services.runner.setup.warehouses import Warehouse
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import DbtCommand, RunCommand
from jetdbt.shared.identity.principals import project_team, team_of
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.outcomes import NODE_CANCELLED, totals
from jetdbt.shared.runs.planned import Planned
from jetdbt.shared.wording.short_quote import quote

__all__ = ["Attempt", "Cancel", "Failed", "Source", "refuse"]

# Seconds between a waiting run's reads of the log for a cancel recorded there.
CANCEL_RECORD_EVERY = 2.0


class Cancel(asyncio.Event):
    """Set when the run is cancelled; `by` is the principal who asked."""

    by = ""

    def request(self, by: str) -> None:
        self.by = self.by or by
        self.set()


@dataclass(frozen=True)
class Ending:
    """How an attempt's steps ended: dbt's exit code (-1: dbt did not say), the error that
    ended them early (None: none did), and whether a cancel or the run's timeout did. A
    cancel is not an error, so no message a step fails with can be read as one; a timeout
    is, and is marked apart so the nodes dbt never reached are listed as for a cancel."""

    code: int
    error: str | None = None
    cancelled: bool = False
    timed_out: bool = False


_CANCELLED = Ending(-1, cancelled=True)


class Failed(Exception):
    """A step ended the attempt before dbt could say how it went; the message is the error."""


@dataclass(frozen=True)
class Source:
    """What an attempt runs: a version (bundle digest) with its pinned packages, the
    command and run arguments its plan is made from, and for a dbt retry the retry
    state it resumes."""

    version: str
    packages_digest: str | None
    cmd: DbtCommand
    args: dict[str, Any] | None
    resumes: ev.RetryStateSaved | None = None
    # The engine environment the version was deployed with (Deployed.environment_lock).
    environment_lock: dict[str, str] | None = None
    # The project environment it runs in, for whom (setup/placement.py).
    where: Placement | None = None


async def refuse(ctx: RunnerContext, project: str, run_id: str, reason: str) -> ev.RunRefused:
    refused = ev.RunRefused(project=project, run_id=run_id, reason=reason)
    await ctx.bus.publish(refused)
    return refused


class Attempt:
    """Attempt `number` of run `run_id`. A subclass gives `mode`, `submitted` and `steps`;
    `check`, `deferred_to`, `would_run` and `before_finished` do nothing unless it says
    otherwise."""

    writes = True  # builds into its environment, so it holds the environment's lease
    connects = True  # its dbt opens warehouse connections: a per_run warehouse issues a login
    resumable = True  # its result is what the principal's next `jetdbt retry` resumes
    # What dbt writes as the invocation's results: `dbt source freshness` writes sources.json.
    results_artifact = "run_results.json"

    def __init__(
        self,
        ctx: RunnerContext,
        project: str,
        body: RunCommand,
        run_id: str,
        number: int,
        cancelled: Cancel,
        source: Source,
    ):
        self.ctx, self.project, self.body = ctx, project, body
        self.run_id, self.number, self.cancelled = run_id, number, cancelled
        self.source = source
        self.prepared: Prepared | None = None
        self.team = ""  # the project's, whose warehouse environments the run acts in
        self.results = results.Overlay()
        self.artifacts: dict[str, bytes] = {}  # by name, kept with the log when the run ends
        self.round = 0  # the node retry round of the latest invocation
        self._last: DbtInvocation | None = None
        self._deadline = float("inf")
        self._fenced = asyncio.Event()  # set when the environment lease could not be kept
        self._log_subject = subjects.run_log(run_id)
        self._last_line = ""  # as dbt wrote it: a spelling may begin there and end in the next
        self.preview: list[dict] = []  # the rows a show's dbt printed
        self.queue_team = ""
        self._told = 0  # RunQueued events this attempt published

    def mode(self) -> str:
        """What the result's `command` field records: a build's test behaviour (build,
        after_all, none), parse or retry."""
        raise NotImplementedError

    def submitted(self) -> dict:
        """The invocation arguments as submitted, for the result and the retry state."""
        raise NotImplementedError

    async def steps(self) -> int:
        """The kind's own invocations; returns the exit code that decides the result."""
        raise NotImplementedError

    async def check(self) -> str | None:
        """Why the prepared run must not start (it is refused), or None."""
        return None

    def deferred_to(self) -> str | None:
        return None

    def would_run(self) -> dict[str, Planned]:
        """The nodes the attempt's commands would run, by unique id: what a cancelled or
        timed-out run lists as not run when dbt never reached them."""
        return {}

    def _other_engine(self) -> str | None:
        """Why this runner must not run the version: its environment for the adapter holds
        another dbt-core or adapter than the one the version was deployed with (a runner
        never runs what the deploy did not resolve); None when they agree."""
        deployed, here = self.source.environment_lock or {}, self.prepared.environment_lock
        names = ("dbt-core", f"dbt-{self.prepared.plan.adapter}")
        differ = [n for n in names if deployed and deployed.get(n) != here.get(n)]
        if not differ:
            return None
        said = ", ".join(f"{n} {deployed.get(n)} (here {here.get(n, 'none')})" for n in differ)
        return (
            f"this runner's engine environment differs from the one the version was deployed"
            f" with: {said}; deploy a changed version to pin one again (an unchanged deploy"
            " parses nothing)"
        )

    async def before_finished(self, result: ev.RunResult) -> None:
        """What the kind publishes before RunFinished, so whoever sees the run finish sees it."""

    async def run(self) -> ev.Event:
        """Run to the end and publish RunFinished, or RunRefused when the run cannot start."""
        seq, team = await self._requested()
        try:
            place = await self._place(team)
        except QueueFull as exc:
            return await refuse(self.ctx, self.project, self.run_id, str(exc))
        try:
            # Announced before it is prepared: a run of its team submitted later cannot start
            # first.
            await admission.announce(self.ctx.bus, seq, team, self._holder())
            return await self._prepared_run(seq, team, place)
        finally:
            await admission.withdraw(self.ctx.bus, seq, team)
            if place is not None:
                await place.release()

    async def _prepared_run(self, seq: int, team: str, place: Place | None) -> ev.Event:
        """Prepare, wait for admission (giving up `place` once it is let in), run, finish."""
        log = jlog.get("runner", project=self.project, run_id=self.run_id, attempt=self.number)
        s = self.source
        # The warehouse serves the project's team, whoever asked (an operator, an admin).
        owner = self.team = await project_team(self.ctx.bus, self.project) or team
        entry = self._entry(seq, team)
        try:
            # A run that has to wait says why while it is prepared and checked, not only
            # after: its team's queue first, every reason once its environment is known.
            async with entry.telling(self._queued):
                self.prepared = await prepare(
                    self.ctx,
                    s.version,
                    f"{self.run_id}.{self.number}",
                    project=self.project,
                    team=owner,
                    packages_digest=s.packages_digest,
                    cmd=s.cmd,
                    args=s.args,
                    where=s.where,
                )
        except Refused as exc:
            return await refuse(self.ctx, self.project, self.run_id, str(exc))
        leases: list[Lease] = []
        keepers: list[asyncio.Task] = []
        try:
            entry.place(self.scope())
            async with entry.telling(self._queued):  # a check may ask dbt (a selection)
                reason = self._other_engine() or await self.check()
            if reason:
                return await refuse(self.ctx, self.project, self.run_id, reason)
            leases = await self._admit(entry)
            if place is not None:
                await place.release()  # started, or cancelled while it waited
            if leases is None:  # cancelled before it started: dbt never runs for it
                self.number -= 1  # the last attempt that started, 0 when none did
                return await self._finish(_CANCELLED)
            keepers = [asyncio.create_task(x.keep(self._fenced)) for x in leases]
            # While it waited, the run may have ended (a duplicate command) or
            # another attempt of it started: the log says, after the lease.
            final = await self.ctx.bus.run_end(self.project, self.run_id)
            if final is not None:
                return final
            await self._renumber()
            if self.number > 1:  # only now: a live earlier attempt would still hold the lease
                await self.ctx.bus.publish(
                    ev.RunAttemptLost(
                        project=self.project, run_id=self.run_id, attempt=self.number - 1
                    )
                )
            await self.ctx.bus.publish(
                ev.RunStarted(
                    project=self.project,
                    run_id=self.run_id,
                    attempt=self.number,
                    version=s.version,
                    runner=self.ctx.name,
                )
            )
            self._deadline = (
                asyncio.get_running_loop().time() + self.ctx.settings.run_timeout_seconds
            )
            ending = await self._steps()
            finished = await self._finish(ending)
            log.info("run_finished", status=finished.result.status, exit_code=ending.code)
            return finished
        finally:
            try:
                for keeper in keepers:
                    keeper.cancel()
                for lease in leases or ():
                    await lease.release()
            finally:  # a stop that cancels a release still leaves no job folder mounted
                if self.prepared.login is not None:  # masked until all of the run is out
                    self.prepared.resolver.masker.forget(self.prepared.login.password)
                self.prepared.cleanup()

    async def _requested(self) -> tuple[int, str]:
        """The run's command sequence (its place in every queue) and its team."""
        bus = self.ctx.bus
        requested = await bus.last_event(subjects.run_event(self.project, self.run_id, "requested"))
        seq = requested.command_seq if isinstance(requested, ev.RunRequested) else 0
        team = (requested.team if isinstance(requested, ev.RunRequested) else "") or (
            await team_of(bus, self.body.requested_by)
        )
        return seq, team

    async def _place(self, team: str) -> Place | None:
        """A place in the team's queue (MAX_QUEUED_RUNS_PER_TEAM), or QueueFull. A run the
        log shows queued or started before (its runner died) was let in then: it needs none."""
        bus = self.ctx.bus
        for kind in ("queued", "started"):
            if await bus.last_event(subjects.run_event(self.project, self.run_id, kind)):
                return None
        cap = self.ctx.settings.max_queued_runs_per_team
        return await queue_cap.take_place(bus, team, cap, self._holder())

    def scope(self) -> str:
        """What the run holds while dbt runs: a build its environment (one at a time); a
        run that builds nothing a scope of its own, so it takes only its slots."""
        return self.prepared.plan.lease_scope if self.writes else f"run {self.run_id}"

    def _entry(self, seq: int, team: str) -> Admission:
        """The run's way in (services/runner/admission/admission.py), before its environment
        is known."""
        settings = self.ctx.settings
        self.queue_team = team  # the requester's: whose queue the run waits in
        return Admission(
            self.ctx.bus,
            team=team,
            seq=seq,
            holder=self._holder(),
            runs=settings.max_concurrent_runs,
            per_team=settings.max_runs_per_team,
            share=self.ctx.share,
        )

    async def _queued(self, blocked: Blocked) -> None:
        """RunQueued: why the run waits and where, numbered from 0 in this attempt."""
        await self.ctx.bus.publish(
            ev.RunQueued(
                project=self.project,
                run_id=self.run_id,
                attempt=self.number,
                reason=blocked.reason,
                position=blocked.position,
                team=self.queue_team,
                n=self._told,
            )
        )
        self._told += 1

    async def _admit(self, entry: Admission) -> list[Lease] | None:
        """Wait, holding no slot, until the run holds its scope, a team slot and a run
        slot; None when it was cancelled before that, here or by a cancel recorded in the
        log (one sent before the run was delivered)."""
        async with supervise.alongside(self._watch_cancel_record):
            leases = await entry.enter(self.cancelled, self._queued)
        if leases is not None and await self._cancel_recorded():
            for lease in leases:
                await lease.release()
            return None
        return leases

    async def _cancel_recorded(self) -> bool:
        """Whether the log holds a cancel of this run; if so the run is cancelled by it."""
        if not self.cancelled.is_set():
            found = await self.ctx.bus.last_event(
                subjects.run_event(self.project, self.run_id, "cancel_requested")
            )
            if isinstance(found, ev.RunCancelRequested):
                self.cancelled.request(found.requested_by)
        return self.cancelled.is_set()

    async def _watch_cancel_record(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and not await self._cancel_recorded():
            await supervise.pause(stop, CANCEL_RECORD_EVERY)

    async def _renumber(self) -> None:
        """One past the last attempt that started: another may have started meanwhile."""
        started = await self.ctx.bus.last_event(
            subjects.run_event(self.project, self.run_id, "started")
        )
        if isinstance(started, ev.RunStarted) and started.attempt >= self.number:
            self.number = started.attempt + 1

    def _holder(self) -> dict:
        return {
            "project": self.project,
            "run_id": self.run_id,
            "attempt": self.number,
            "runner": self.ctx.name,
        }

    async def _steps(self) -> Ending:
        """How the steps ended: a cancel, a timeout or a failed step end the run early.
        A per_run warehouse's login lives exactly as long as they do."""
        try:
            await self._own_login()
            return Ending(await self.steps())
        except Failed as exc:
            return Ending(-1, str(exc))
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise  # the runner is shutting down: the command is redelivered, not settled
            return _CANCELLED
        except (LeaseLost, ForkServerLost):
            raise  # this attempt says nothing more: the command comes back as the next one
        except RunTimedOut:
            seconds = self.ctx.settings.run_timeout_seconds
            return Ending(-1, f"timed out after {seconds}s", timed_out=True)
        except BoundExceeded as exc:
            return Ending(-1, str(exc))
        except Exception as exc:  # noqa: BLE001 - the run ends saying so, never hangs
            jlog.get("runner", project=self.project, run_id=self.run_id).exception("run_broke")
            broke = f"the runner failed: {exc.__class__.__name__}: {quote(str(exc), 300)}"
            return Ending(-1, broke)
        finally:
            await self._drop_login()

    def _per_run_warehouse(self) -> Warehouse | None:
        """The run's warehouse when it issues the run a login of its own (and the profile is
        the warehouse's, not one the project carries)."""
        wh = self.ctx.warehouses.get(self.prepared.plan.warehouse)
        own_profile = self.prepared.descriptor.profile.profiles_yml
        if wh is None or wh.credentials != run_credentials.PER_RUN or own_profile:
            return None
        return wh

    async def _own_login(self) -> None:
        """The run's own warehouse login, made just before dbt starts and valid until the
        run's deadline (services/runner/setup/run_credentials.py)."""
        wh = self._per_run_warehouse()
        if wh is None or not self.connects:
            return
        left = self._time_left()
        issue = asyncio.create_task(
            run_credentials.issue(
                wh,
                self.prepared.resolver,
                run_credentials.places(self.prepared.plan),
                scope=self.scope(),
                holder=f"{self.project} run {self.run_id} attempt {self.number}",
                team=self.team,
                writes=run_credentials.writes(self.source.cmd),
                seconds=left,
            )
        )
        # Raced against a cancel and the deadline: a warehouse that keeps the login waiting
        # never keeps the run, its lease and its slot.
        stop = asyncio.create_task(self.cancelled.wait())
        try:
            await asyncio.wait({issue, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not issue.done():
            issue.cancel()
            await asyncio.gather(issue, return_exceptions=True)
            if self.cancelled.is_set():
                raise asyncio.CancelledError("cancelled")
            raise RunTimedOut(self.ctx.settings.run_timeout_seconds)
        try:
            login = issue.result()
        except run_credentials.ISSUE_FAILURES as exc:
            raise Failed(
                f"the run's own login on warehouse {wh.name!r} could not be made:"
                f" {exc.__class__.__name__}: {quote(str(exc), 300)}"
            ) from None
        self.prepared.use_login(login)

    async def _drop_login(self) -> None:
        """The run's own login dropped, however the steps ended, before the run's end is
        published; one that cannot be is dropped by a runner's sweep once it expired."""
        login = self.prepared.login
        if login is None:
            return
        try:
            await asyncio.wait_for(
                run_credentials.drop(self._per_run_warehouse(), self.prepared.resolver, login),
                run_credentials.DROP_SECONDS,
            )
        except (*run_credentials.ISSUE_FAILURES, TimeoutError) as exc:
            jlog.get("runner", project=self.project, run_id=self.run_id).warning(
                "run_login_not_dropped", role=login.user, error=quote(str(exc), 300)
            )

    async def log(self, line: str) -> None:
        """A line in the run's human-readable log (masked: a secret may be in any line, or
        begin in the line before it)."""
        previous, self._last_line = self._last_line, line
        await self.ctx.bus.publish_line(self._log_subject, line, previous)

    async def invoke(self, inv: DbtInvocation, round_: int = 0) -> int:
        """Run one of this attempt's invocations, its nodes published as node retry round
        `round_`; raises CancelledError when the run is cancelled meanwhile."""
        self.round, self._last = round_, inv
        self.results.begin()
        run = asyncio.create_task(inv.run(self.log, self._on_event, self._time_left()))
        stop = asyncio.create_task(self.cancelled.wait())
        fenced = asyncio.create_task(self._fenced.wait())
        try:
            await asyncio.wait({run, stop, fenced}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            fenced.cancel()
        if not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            if self._fenced.is_set():
                raise LeaseLost(f"lost the lease on {self.prepared.plan.lease_scope}")
            raise asyncio.CancelledError("cancelled")
        code = run.result()
        run_results = inv.artifact(self.results_artifact)
        if run_results is not None:
            if self.results_artifact == "sources.json":
                run_results = results.freshness_as_results(run_results)
            self.results.add(run_results, inv.artifact("manifest.json"), round_)
            self.artifacts = artifacts.read(inv)  # the last invocation's, as dbt wrote them
            # Gone, so a later invocation that writes none is not read as this one again.
            inv.artifact_path(self.results_artifact).unlink()
        return code

    def _time_left(self) -> float:
        """RUN_TIMEOUT_SECONDS bounds the whole run: every invocation and retry round."""
        left = self._deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise RunTimedOut(self.ctx.settings.run_timeout_seconds)
        return left

    async def pause(self, seconds: float) -> None:
        """Wait `seconds`; raises CancelledError when the run is cancelled meanwhile."""
        try:
            await asyncio.wait_for(self.cancelled.wait(), seconds)
        except TimeoutError:
            return
        raise asyncio.CancelledError("cancelled")

    def artifact(self, name: str) -> dict | None:
        """The latest invocation's artifact `name`, as JSON; None when there is none."""
        return self._last.artifact(name) if self._last else None

    def artifact_path(self, name: str) -> Path | None:
        """Where the latest invocation wrote artifact `name`; None before any invocation."""
        return self._last.artifact_path(name) if self._last else None

    async def _on_event(self, record: dict) -> None:
        # A node event happened when dbt logged it: its `at` is dbt's time, not the publish's.
        at = results.logged_at(record)
        rows = results.show_rows(record)
        if rows is not None:
            self.preview += rows
            return
        start = results.node_start(record)
        if start is not None:
            self.results.started(start, self.round)
            await self.ctx.bus.publish(
                ev.NodeStarted(
                    project=self.project,
                    run_id=self.run_id,
                    attempt=self.number,
                    at=at,
                    unique_id=start.unique_id,
                    resource_type=start.resource_type,
                    name=start.name,
                    relation=start.relation,
                    started_at=start.started_at,
                    round=self.round,
                )
            )
            return
        node = results.node_finished(record, self.round)
        if node is not None:
            self.results.finished(node)
            await self.ctx.bus.publish(
                ev.NodeFinished(
                    project=self.project, run_id=self.run_id, attempt=self.number, at=at, node=node
                )
            )

    def _error_tail(self) -> str:
        """What a failed run without a failed node reports: the last lines dbt printed."""
        return self._last.error_tail() if self._last else ""

    def _result(self, ending: Ending) -> ev.RunResult:
        """The structured result of how the attempt went, every node in it."""
        prepared, plan = self.prepared, self.prepared.plan
        code, error = ending.code, ending.error
        by = f"cancelled by {self.cancelled.by or 'a cancel'}"
        if ending.cancelled:
            self.results.close(NODE_CANCELLED, f"{by} while dbt was running it")
        elif error is not None:
            self.results.close("error", error)
        # A cancel or the timeout cut the run short: what dbt never reached is listed.
        cut = f"was {by}" if ending.cancelled else error if ending.timed_out else None
        if cut is not None:
            unreached = f"not run: the run {cut} before dbt reached it"
            self.results.not_reached(self.would_run(), unreached)
        nodes = self.results.in_order()
        failed = any(n.outcome == "failed" for n in nodes)
        if ending.cancelled:
            status = error = run_status.CANCELLED  # what the result has always said of a cancel
        else:
            status = run_status.PASSED if code == 0 and not failed else run_status.FAILED
        if status == run_status.FAILED and error is None and not failed:
            error = self._error_tail() or f"dbt exited with code {code} and printed nothing"
        return ev.RunResult(
            status=status,
            engine=plan.engine,
            engine_version=prepared.engine_version,
            mode=self.mode(),
            totals=totals(n.outcome for n in nodes),
            nodes=nodes,
            exit_code=code,
            invocation_args=self.submitted(),
            warehouse=plan.warehouse,
            target=plan.target,
            error=error,
            deferred_to=self.deferred_to(),
            cancelled_by=(self.cancelled.by or None) if ending.cancelled else None,
            preview=self.preview,
            schema=plan.environment.schema if plan.environment else None,
        )

    async def _finish(self, ending: Ending) -> ev.RunFinished:
        """Publish the run's end, always: its result, or, when that cannot be published, a
        small RunFinished that says the run failed and why. Either way the command is
        settled by it, so a failed publish never makes the build run again."""
        result = self._result(ending)
        try:
            return await self._publish_end(result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the run must end, saying why
            jlog.get("runner", project=self.project, run_id=self.run_id).exception(
                "result_not_published"
            )
            return await self._publish_unpublished(result, exc)

    async def _publish_end(self, result: ev.RunResult) -> ev.RunFinished:
        """Save retry state (unless hidden), what the kind adds, the kept log, then
        RunFinished last, its nodes in a blob when they are too many to travel inline."""
        bus, submitted = self.ctx.bus, result.invocation_args
        merged = self.results.merged
        if merged is not None and not self.body.hidden and self.resumable:
            await bus.publish(
                ev.RetryStateSaved(
                    project=self.project,
                    principal=self.body.requested_by,
                    run_id=self.run_id,
                    attempt=self.number,
                    run_results_digest=await bus.put_blob(msgspec.json.encode(merged)),
                    version=self.source.version,
                    packages_digest=self.source.packages_digest,
                    profile_digest=self.prepared.profile_digest,
                    command={k: v for k, v in submitted.items() if k != "args"},
                    args=submitted.get("args", {}),
                )
            )
        await self.before_finished(result)
        plan = self.prepared.plan
        ended = kept_log.EndedRun(
            project=self.project,
            run_id=self.run_id,
            attempt=self.number,
            principal=self.body.requested_by,
            status=result.status,
            scope=plan.environment.key() if plan.environment else plan.lease_scope,
            environment=plan.environment,
        )
        # The log kept and retention applied, before the end.
        kept = await kept_log.keep(bus, ended, self.artifacts)
        if kept is not None:
            await retention.after_run(bus, self.ctx.settings.run_retention, ended, kept)
        carried, blob = await event_blobs.result_split(bus, result)
        finished = ev.RunFinished(
            project=self.project,
            run_id=self.run_id,
            attempt=self.number,
            result=carried,
            nodes_blob=blob,
        )
        await bus.publish(finished)
        return msgspec.structs.replace(finished, result=result)

    async def _publish_unpublished(self, result: ev.RunResult, exc: Exception) -> ev.RunFinished:
        """The run's end when its result could not be published: failed, naming why, with
        its totals but no node (each node's outcome is in its own event). It has the
        result's id, so a result that did land wins as the duplicate; it is tried until
        the stream stores it, since no run may stay running."""
        stored = None
        with contextlib.suppress(Exception):  # NATS away: the publish below waits for it
            stored = await self.ctx.bus.last_event(
                subjects.run_event(self.project, self.run_id, "finished")
            )
        if isinstance(stored, ev.RunFinished) and stored.attempt == self.number:
            return stored
        reason = (
            f"the run's result could not be published ({exc.__class__.__name__}:"
            f" {quote(str(exc), 300)}); dbt's own outcome was {result.status!r}, and each"
            " node's outcome is in its node events"
        )
        finished = ev.RunFinished(
            project=self.project,
            run_id=self.run_id,
            attempt=self.number,
            result=msgspec.structs.replace(
                result, status=run_status.FAILED, nodes=[], error=reason
            ),
        )
        await self.ctx.bus.publish(finished, retry_for=math.inf)
        return finished

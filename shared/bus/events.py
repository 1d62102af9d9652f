"""Every fact jetdbt records, as frozen, tagged, versioned msgspec Structs.

One Decoder of the union reads every event. New fields always get defaults;
a field's type never changes: a new meaning is a new tag version. Each event
knows its subject and its deterministic id (sent as Nats-Msg-Id), built from
what makes it unique, so a runner republishing after a crash is deduplicated.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, Literal, Union

import msgspec
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.commands import Trigger
from jetdbt.shared.jobs.webhooks import DeliveryState
from jetdbt.shared.project.bundle import Skipped
from jetdbt.shared.project.environments import Environment
from jetdbt.shared.runs.outcomes import Outcome

__all__ = [
    "fits",
    "heads_its_subject",
    "Event",
    "Threshold",
    "Freshness",
    "NodeResult",
    "RunResult",
    "CatalogColumn",
    "CatalogNode",
    "Blob",
    "DeployRequested",
    "DeployRefused",
    "Deployed",
    "DeployUnchanged",
    "DeployFailed",
    "Promoted",
    "promotion_slot",
    "RunRequested",
    "RunRefused",
    "RunStarted",
    "RunAttemptLost",
    "RunQueued",
    "RunCancelRequested",
    "RunFinished",
    "RunLogKept",
    "RunPruned",
    "CatalogGenerated",
    "NodeStarted",
    "NodeFinished",
    "GraphIngested",
    "RelationMaterialized",
    "RelationRefused",
    "RetryStateSaved",
    "StatePublished",
    "JobSaved",
    "JobDeleted",
    "JobRefused",
    "ScheduleSaved",
    "ScheduleFired",
    "ScheduleCoalesced",
    "HookSaved",
    "HookRemoved",
    "HookDelivered",
    "EVENT_TYPES",
    "RUN_ENDS",
    "RUN_END_KINDS",
    "SUPERSEDED",
    "MAX_EVENT_BYTES",
    "EventTooLarge",
    "encode",
    "decode",
]

# What one event may weigh once encoded: half of NATS's default payload limit (1 MiB),
# so an event is stored whatever else a message carries. What grows with a project
# travels as a blob the event names (`Blob`), never in the event.
MAX_EVENT_BYTES = 512 * 1024


class EventTooLarge(ValueError):
    """An event over MAX_EVENT_BYTES: a bug in what it carries, never sent."""


def fits(event: Event, subject: str) -> bool:
    """Whether `event` is a fact of the subject it was stored on: every event names its own
    subject, so one of another family (a run.finished payload on a relation subject) or of
    another project is never read as a fact there."""
    return event.subject() == subject


def heads_its_subject(type_tag: str | None, project: str | None, subject: str) -> bool:
    """`fits` from a payload's type and project alone (an export reads no more of a million
    events): the type's family is the subject's (`run.finished.v1` on `dbt.evt.run.…`), and
    an event keyed by a project names the subject's project."""
    family = subjects.event_family(subject)
    if not type_tag or type_tag.split(".")[0] != family or subject.count(".") < 3:
        return False
    return family == "relation" or subjects.keyed_by(subject, project or "")


def _now() -> datetime:
    return datetime.now(UTC)


class Threshold(msgspec.Struct, frozen=True, kw_only=True):
    """A source's freshness threshold as its author wrote it: `count` `period`s."""

    count: int
    period: str


class Freshness(msgspec.Struct, frozen=True, kw_only=True):
    """How old a source's data was when `dbt source freshness` checked it (its sources.json):
    the newest loaded_at, when dbt looked, the age in seconds between them, and the
    source's own thresholds (None: not set)."""

    max_loaded_at: datetime | None = None
    snapshotted_at: datetime | None = None
    age_seconds: float | None = None
    warn_after: Threshold | None = None
    error_after: Threshold | None = None


class NodeResult(msgspec.Struct, frozen=True, kw_only=True):
    """One node's result: dbt's `status` verbatim beside the stable `outcome`."""

    unique_id: str
    status: str
    outcome: Outcome
    resource_type: str = ""
    name: str = ""
    relation: str | None = None
    message: str | None = None
    execution_time: float | None = None
    rows_affected: int | None = None
    failures: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    round: int = 0
    # The SQL dbt compiled for the node in this run (its run_results.json, cut to a limit),
    # and the dbt thread that ran it: the viewer's node panel and timeline.
    compiled_code: str | None = None
    thread: str | None = None
    # A source's freshness, in a `source freshness` run's result (None: any other node).
    freshness: Freshness | None = None


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """The structured result of a run: a contract, legible without reading logs."""

    status: str
    engine: str
    engine_version: str
    # What ran: a build's test behaviour (build, after_all, none), another dbt command
    # (seed, run_operation...), parse or retry; the attempt's `mode`. On the wire it is
    # `command`, its first name, so every recorded result reads and writes the same.
    mode: str = msgspec.field(name="command")
    totals: dict[str, int]
    nodes: list[NodeResult]
    exit_code: int
    invocation_args: dict[str, Any] = {}
    warehouse: str = "main"
    target: str = ""
    error: str | None = None
    deferred_to: str | None = None
    cancelled_by: str | None = None  # the principal whose cancel ended the run
    preview: list[dict[str, Any]] = []  # a show's rows, as dbt printed them (at most 64 KiB)
    # The schema the run built in, when known before dbt ran (a pull request's own, a
    # scratch one, the environment's); None: not known, or recorded before it was said.
    schema: str | None = None


class CatalogColumn(msgspec.Struct, frozen=True, kw_only=True):
    """A column as the warehouse's catalog lists it, with the warehouse's own type."""

    name: str
    data_type: str


class CatalogNode(msgspec.Struct, frozen=True, kw_only=True):
    """A node's relation in the warehouse's catalog: its columns in the warehouse's order."""

    unique_id: str
    columns: list[CatalogColumn]


class Blob(msgspec.Struct, frozen=True, kw_only=True):
    """An object in DBT_BLOBS, named by its content digest: what an event carries in place
    of a body that grows with the project (its size in bytes, and how many items it holds)."""

    digest: str
    size: int
    count: int = 0


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    project: str
    at: datetime = msgspec.field(default_factory=_now)

    def event_id(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def subject(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


class _DeployEvent(Event, frozen=True, kw_only=True):
    deploy_id: str
    _kind = ""

    def subject(self) -> str:
        return subjects.deploy_event(self.project, self._kind)

    def event_id(self) -> str:
        return f"deploy:{self.project}:{self.deploy_id}:{self._kind}"


class DeployRequested(_DeployEvent, frozen=True, kw_only=True, tag="deploy.requested.v1"):
    bundle_digest: str
    bundle_size: int
    requested_by: str = ""
    # The authenticated principal's team (a project's team is its deployers') and the
    # door the command came in by: "api token <id>", "nats user <name>", "nats operator".
    team: str = ""
    door: str = ""
    _kind = "requested"


class DeployRefused(_DeployEvent, frozen=True, kw_only=True, tag="deploy.refused.v1"):
    reason: str
    _kind = "refused"


class Deployed(_DeployEvent, frozen=True, kw_only=True, tag="deploy.deployed.v2"):
    """A version that parsed: the bundle digest IS the version. A version of many files keeps
    their list in the blob `files_blob` names (`files` is then empty;
    shared/blobs/event_blobs.py)."""

    version: str
    bundle_size: int
    manifest_digest: str
    manifest_size: int
    engine: str
    engine_version: str
    adapter: str
    adapter_version: str
    files: list[str]
    skipped: list[Skipped] = []
    requested_by: str = ""
    packages_digest: str | None = None
    files_blob: Blob | None = None
    # How many files the deploy left out; `skipped` names the first of them (0: all named).
    skipped_count: int = 0
    # The folder it came from, as its deploy named it (services/cli/deploy_source.py), and its
    # command's stream sequence: the current version is the deployed one submitted last.
    source: list[str] = []
    command_seq: int = 0
    # The digest of the package-lock.yml the deploy's `dbt deps` wrote (None: no packages):
    # what a later deploy commits to reuse the resolution (packages.resolution_key).
    package_lock_digest: str | None = None
    # The engine environment's every package at its exact version, when the adapter runs in
    # one provisioned for it (services/runner/provision/environments.py); {}: jetdbt's own.
    environment_lock: dict[str, str] = {}
    # The configured warehouse its descriptor names (profile.warehouse): what the API checks
    # a run against the warehouse grants before publishing it ("": deployed before this).
    warehouse: str = ""
    # The pull request whose check uploaded it (0: none): such a version is promoted only
    # into the PR's own slot, never into an environment.
    pr: int = 0
    # Whether the deploy itself made its version the default environment's: every deploy did
    # before promotions were events (so an old event reads True); a runner now says False
    # and publishes each promotion as a Promoted event.
    current: bool = True
    # The environments its descriptor has (jetdbt.shared.project.descriptor.environment_names) and
    # which of
    # them are personal: what a promotion checks without opening the bundle ([]: deployed
    # before environments, read as an empty descriptor's).
    environments: list[str] = []
    personal_environments: list[str] = []
    _kind = "deployed"


def promotion_slot(environment: str, principal: str = "", pr: int = 0) -> str:
    """What a promotion moves: an environment (`prod`), one person's own environment
    (`dev/<principal>`), or a pull request's check (`pr:<n>`): the one spelling of a slot
    (no environment name holds a ':' or a '/', so no two of them are one slot)."""
    if pr:
        return f"pr:{pr}"
    return f"{environment}/{principal}" if principal else environment


class Promoted(Event, frozen=True, kw_only=True, tag="deploy.promoted.v1"):
    """A slot of a project (promotion_slot) now runs `version`, which it did not before
    (`previous`, "": nothing). A deploy promotes its version (`deploy_id`), a promote command
    moves a slot to any version deployed before, which is also the rollback. `deployed_seq`
    is the stream sequence of the version's Deployed event, what a run of the slot reads."""

    environment: str
    principal: str = ""
    pr: int = 0
    version: str
    previous: str = ""
    deployed_seq: int
    deploy_id: str = ""
    requested_by: str = ""
    command_seq: int = 0

    def slot(self) -> str:
        return promotion_slot(self.environment, self.principal, self.pr)

    def subject(self) -> str:
        return subjects.promotion_event(self.project, self.slot())

    def event_id(self) -> str:
        return f"promoted:{self.project}:{self.slot()}:{self.command_seq}:{self.version}"


class DeployUnchanged(_DeployEvent, frozen=True, kw_only=True, tag="deploy.unchanged.v1"):
    version: str
    _kind = "unchanged"


class DeployFailed(_DeployEvent, frozen=True, kw_only=True, tag="deploy.failed.v1"):
    version: str
    reason: str
    _kind = "failed"


class _RunEvent(Event, frozen=True, kw_only=True):
    run_id: str
    _kind = ""

    def subject(self) -> str:
        return subjects.run_event(self.project, self.run_id, self._kind)

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:{self._kind}"


class RunRequested(_RunEvent, frozen=True, kw_only=True, tag="run.requested.v1"):
    """The command as submitted: references stay references, nothing is resolved."""

    command: dict[str, Any]
    requested_by: str = ""
    requested_at: datetime | None = None
    hidden: bool = False
    command_seq: int = 0
    team: str = ""  # the principal's team, and the door its command came in by
    door: str = ""
    job: str = ""  # the saved job the run is of ("": none)
    trigger: Trigger = ""  # what started it ("": a run from before triggers)
    depth: int = 0  # a triggered run's place in its chain of causes (RunCommand.depth)
    # The project environment it runs in, by name ("": before environments, read as the
    # default one), and the pull request it checks (0: none).
    environment: str = ""
    pr: int = 0
    _kind = "requested"

    def event_id(self) -> str:
        """Without its project: run ids are unique across projects, and two projects asking
        for one run id at once store one request (the other is a duplicate the stream drops,
        and its runner refuses it), not two."""
        return f"run:{self.run_id}:requested"


class RunRefused(_RunEvent, frozen=True, kw_only=True, tag="run.refused.v1"):
    reason: str
    _kind = "refused"


class RunStarted(_RunEvent, frozen=True, kw_only=True, tag="run.started.v1"):
    attempt: int
    version: str
    runner: str = ""
    _kind = "started"

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:{self.attempt}:started"


class RunAttemptLost(_RunEvent, frozen=True, kw_only=True, tag="run.attempt_lost.v1"):
    """The attempt before `attempt` died without finishing (noticed by redelivery)."""

    attempt: int
    _kind = "attempt_lost"

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:{self.attempt}:attempt_lost"


class RunQueued(_RunEvent, frozen=True, kw_only=True, tag="run.queued.v1"):
    """Attempt `attempt` waits to start, holding no slot: why (its environment, its team's
    slots, the run slots), its place in its queues (1: next) and its team. Published when
    it starts waiting and whenever the reason or the place changes; `n` counts them."""

    attempt: int
    reason: str
    position: int
    team: str = ""
    n: int = 0
    _kind = "queued"

    def event_id(self) -> str:
        # What it says is in the id: a redelivery's n=0 that says something new is no duplicate.
        said = hashlib.sha256(f"{self.position}:{self.reason}".encode()).hexdigest()[:12]
        return f"run:{self.project}:{self.run_id}:{self.attempt}:queued:{self.n}:{said}"


class RunCancelRequested(_RunEvent, frozen=True, kw_only=True, tag="run.cancel_requested.v1"):
    """A cancel command for the run, recorded by the durable consumer so it wins even when
    it came before the run was delivered: admission reads it before the run starts."""

    requested_by: str = ""
    command_seq: int = 0
    _kind = "cancel_requested"

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:cancel_requested:{self.command_seq}"


class RunFinished(_RunEvent, frozen=True, kw_only=True, tag="run.finished.v2"):
    """The run's end and its result. A result whose nodes would make the event large keeps
    them in the blob `nodes_blob` names (`result.nodes` is then empty): shared/blobs/event_blobs.py
    stores and reads them, so every reader sees the same whole result."""

    attempt: int
    result: RunResult
    nodes_blob: Blob | None = None
    _kind = "finished"

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:{self.attempt}:finished"


class RunLogKept(_RunEvent, frozen=True, kw_only=True, tag="run.log_kept.v1"):
    """The run's whole log, stored as object `object` (named for the run, never shared) when
    attempt `attempt` ended; published before RunFinished, so whoever sees the end can read it."""

    attempt: int
    object: str
    lines: int
    bytes: int
    # dbt's artifacts of the run's last invocation as dbt wrote them: name -> blob digest.
    artifacts: dict[str, str] = {}
    _kind = "log_kept"

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:{self.attempt}:log_kept"


class RunPruned(_RunEvent, frozen=True, kw_only=True, tag="run.pruned.v1"):
    """Retention removed the run's files: `objects` are deleted after this is stored, so a
    replay folds the same; `kept` are files of the run another run or version still uses."""

    objects: list[str]
    kept: list[str] = []
    _kind = "pruned"


class CatalogGenerated(_RunEvent, frozen=True, kw_only=True, tag="run.catalog.v1"):
    """What `dbt docs generate` found in the warehouse (its catalog.json), each node's columns
    with their types, published before RunFinished. Many nodes travel in the blob `nodes_blob`
    names (`nodes` is then empty; shared/blobs/event_blobs.py); past the runner's bounds the first
    nodes and columns are kept and `cut` counts the nodes left out."""

    attempt: int
    generated_at: datetime | None = None
    nodes: list[CatalogNode] = []
    nodes_blob: Blob | None = None
    cut: int = 0
    _kind = "catalog"

    def event_id(self) -> str:
        return f"run:{self.project}:{self.run_id}:{self.attempt}:catalog"


class _NodeEvent(Event, frozen=True, kw_only=True):
    run_id: str
    attempt: int
    _kind = ""

    def subject(self) -> str:
        return subjects.node_event(self.project, self.run_id, self._kind)


class NodeStarted(_NodeEvent, frozen=True, kw_only=True, tag="node.started.v1"):
    unique_id: str
    resource_type: str = ""
    name: str = ""
    relation: str | None = None
    started_at: datetime | None = None
    round: int = 0
    _kind = "started"

    def event_id(self) -> str:
        return f"node:{self.run_id}:{self.attempt}:{self.round}:{self.unique_id}:started"


class NodeFinished(_NodeEvent, frozen=True, kw_only=True, tag="node.finished.v1"):
    node: NodeResult
    _kind = "finished"

    def event_id(self) -> str:
        n = self.node
        return f"node:{self.run_id}:{self.attempt}:{n.round}:{n.unique_id}:finished"


class GraphIngested(Event, frozen=True, kw_only=True, tag="graph.ingested.v1"):
    """A project graph stored in the object store under `graph_digest`.

    scope "version": the deployed version's graph; "run": a run's own snapshot, written
    only when it differs from its version's; "parse": a parse of an undeployed bundle
    (`version` is ""), keyed by that job alone. `graph_digest` names the blob;
    `content_digest` covers nodes, edges and relation root, and is what runs compare.
    """

    version: str
    run_id: str | None = None
    scope: str
    graph_digest: str
    graph_size: int
    node_count: int
    edge_count: int
    content_digest: str = ""
    principal: str = ""
    # Where the target resolved to when a version's graph was published (the plan's
    # jetdbt.shared.project.environments key: warehouse, target, schema, database); "" when
    # unknown. A run that resolves elsewhere republishes the version's graph
    # (services/runner/graph).
    resolved_root: str = ""

    def subject(self) -> str:
        return subjects.graph_event(self.project, self.scope, self.run_id or self.version)

    def event_id(self) -> str:
        key = self.run_id or self.version
        return f"graph:{self.project}:{self.scope}:{key}:{self.graph_digest}"


class RelationMaterialized(Event, frozen=True, kw_only=True, tag="relation.materialized.v1"):
    """A write another system declares on a warehouse relation (no project: any producer).

    The system publishes it with a plain NATS publish; its account files it in the intake
    under its principal, and a runner records it here, on subjects.relation_event(relation,
    "materialized"), naming the `publisher` the server vouched for (services/runner/
    relations_watch.py). `at` is required: decoding must not stamp it, or a replay would
    fold another time.
    """

    project: str = ""
    at: datetime
    relation: str
    producer: str
    status: str = "success"
    row_count: int | None = None
    publisher: str = ""  # the NATS principal whose write a runner checked ("": the operator)
    # The publisher's team as the runner found it: only its own team's jobs wake on it.
    team: str = ""

    def subject(self) -> str:
        return subjects.relation_event(self.relation, "materialized")

    def event_id(self) -> str:
        return f"relation:{self.relation}:{self.producer}:{self.at.isoformat()}"


class RelationRefused(Event, frozen=True, kw_only=True, tag="relation.refused.v1"):
    """A declared write a runner did not record, and why: the one at intake sequence
    `intake_seq` (earlier logs: the one at event stream sequence `write_seq`)."""

    project: str = ""
    relation: str
    producer: str = ""
    write_seq: int = 0
    reason: str
    intake_seq: int = 0
    publisher: str = ""

    def subject(self) -> str:
        return subjects.relation_event(self.relation, "refused")

    def event_id(self) -> str:
        if self.intake_seq:
            return f"relation-refused:in:{self.intake_seq}"
        return f"relation-refused:{self.write_seq}"


class RetryStateSaved(Event, frozen=True, kw_only=True, tag="retry.saved.v1"):
    """What a later `dbt retry` of this run needs, saved per (project, principal).

    Only the latest run per (project, principal) counts: it is the last message on
    the subject. The run's identity pins what a retry may resume: the version, the
    digests of its profile and package resolution, and its arguments as submitted.
    """

    principal: str
    run_id: str
    attempt: int
    run_results_digest: str
    version: str
    packages_digest: str | None = None
    profile_digest: str
    command: dict[str, Any]
    args: dict[str, Any] = {}

    def subject(self) -> str:
        return subjects.retry_event(self.project, self.principal, "saved")

    def event_id(self) -> str:
        return f"retry:{self.project}:{self.run_id}:{self.attempt}:saved"


class StatePublished(Event, frozen=True, kw_only=True, tag="state.published.v1"):
    """The state a later run of this environment defers to: the last successful full build.

    `run_results_digest` is None when the build was recovered by in-run node retry: its
    run_results describe the retried slice, not the build, so only the manifest is kept.
    """

    environment: Environment
    run_id: str
    version: str
    manifest_digest: str
    manifest_size: int
    run_results_digest: str | None = None

    def subject(self) -> str:
        return subjects.state_event(self.project, self.environment.key(), "published")

    def event_id(self) -> str:
        return f"state:{self.project}:{self.run_id}:published"


class _JobEvent(Event, frozen=True, kw_only=True):
    name: str
    command_seq: int = 0
    _kind = ""

    def subject(self) -> str:
        return subjects.job_event(self.project, self.name, self._kind)

    def event_id(self) -> str:
        return f"job:{self.project}:{self.name}:{self._kind}:{self.command_seq}"


class JobSaved(_JobEvent, frozen=True, kw_only=True, tag="job.saved.v1"):
    """A job as saved: `spec` is jetdbt.shared.bus.commands.JobSpec as submitted (a dict, so a later
    field of a command never makes an old job undecodable)."""

    spec: dict[str, Any]
    saved_by: str = ""
    # The role its saver ran the project with (jetdbt.shared.identity.principals.run_role): a run
    # of the job
    # takes no higher one, whoever fires it ("": saved before roles were recorded).
    role: str = ""
    _kind = "saved"


class JobDeleted(_JobEvent, frozen=True, kw_only=True, tag="job.deleted.v1"):
    deleted_by: str = ""
    _kind = "deleted"


class JobRefused(Event, frozen=True, kw_only=True, tag="job.refused.v1"):
    """A job command that was refused, and why."""

    name: str = ""
    action: str = ""
    reason: str
    command_seq: int = 0

    def subject(self) -> str:
        return subjects.job_refused(self.project)

    def event_id(self) -> str:
        return f"job-refused:{self.project}:{self.command_seq}"


ScheduleState = Literal["active", "paused", "removed"]


class ScheduleSaved(Event, frozen=True, kw_only=True, tag="schedule.saved.v1"):
    """A job's schedule as it is now: `active` (its definition is on the commands stream and
    the server fires it), `paused` or `removed` (the definition parked: it never fires)."""

    job: str
    state: ScheduleState
    cron: str = ""
    tz: str = ""
    principal: str = ""  # whose runs its fires are (the runs' principal)
    role: str = ""  # the role it was scheduled (or resumed) with: its fires take no higher
    command_seq: int = 0

    def subject(self) -> str:
        return subjects.schedule_event(self.project, self.job, "saved")

    def event_id(self) -> str:
        return f"schedule:{self.project}:{self.job}:{self.command_seq}"


class _ScheduleFire(Event, frozen=True, kw_only=True):
    """A fire of a job's schedule by the server. `command_seq` is the fire's own message on
    the commands stream, so a redelivered fire is the same event."""

    job: str
    run_id: str
    fired_at: datetime
    next_at: datetime | None = None
    command_seq: int
    _kind = ""

    def subject(self) -> str:
        return subjects.schedule_event(self.project, self.job, self._kind)

    def event_id(self) -> str:
        return f"schedule-{self._kind}:{self.project}:{self.command_seq}"


class ScheduleFired(_ScheduleFire, frozen=True, kw_only=True, tag="schedule.fired.v1"):
    """The server fired a job's schedule: the run it started, and when it fires next."""

    _kind = "fired"


class ScheduleCoalesced(_ScheduleFire, frozen=True, kw_only=True, tag="schedule.coalesced.v1"):
    """The server fired a job's schedule while the run of its previous fire (`run_id`) was
    still queued or running: the fire joined that run and started none, so a schedule never
    queues a run behind its own."""

    _kind = "coalesced"


class HookSaved(Event, frozen=True, kw_only=True, tag="hook.saved.v1"):
    """A webhook of a project (of one job's runs when `job` is set): where the notifier posts
    which run events (`on`: start, success, failure, end). `revision` is the saving's own
    id. Its secret is never here: it lives in the notifier's bucket alone."""

    name: str
    url: str
    on: list[str]
    job: str = ""
    saved_by: str = ""
    revision: str

    def subject(self) -> str:
        return subjects.hook_event(self.project, self.name, "saved")

    def event_id(self) -> str:
        return f"hook-saved:{self.project}:{self.name}:{self.revision}"


class HookRemoved(Event, frozen=True, kw_only=True, tag="hook.removed.v1"):
    name: str
    removed_by: str = ""
    revision: str

    def subject(self) -> str:
        return subjects.hook_event(self.project, self.name, "removed")

    def event_id(self) -> str:
        return f"hook-removed:{self.project}:{self.name}:{self.revision}"


class HookDelivered(Event, frozen=True, kw_only=True, tag="hook.delivery.v1"):
    """One attempt of one delivery (a run event to a hook), and what the receiver answered:
    `status` its HTTP code (0: no answer), `error` why the attempt failed in jetdbt's own
    words (shared/jobs/hook_reasons.py: never the answer's bytes). `state` is `delivered`,
    `retrying` (another attempt follows after a delay) or `dead` (the last attempt failed:
    the delivery gave up, a dead letter of the hook)."""

    hook: str
    delivery_id: str
    run_id: str
    event: str  # start, success, failure
    attempt: int
    status: int = 0
    state: DeliveryState
    error: str = ""

    def subject(self) -> str:
        return subjects.hook_event(self.project, self.hook, "delivery")

    def event_id(self) -> str:
        return f"hook-delivery:{self.delivery_id}:{self.attempt}"


EVENT_TYPES: tuple[type[Event], ...] = (
    DeployRequested,
    DeployRefused,
    Deployed,
    DeployUnchanged,
    DeployFailed,
    Promoted,
    RunRequested,
    RunRefused,
    RunStarted,
    RunAttemptLost,
    RunQueued,
    RunCancelRequested,
    RunFinished,
    RunLogKept,
    RunPruned,
    CatalogGenerated,
    NodeStarted,
    NodeFinished,
    GraphIngested,
    RelationMaterialized,
    RelationRefused,
    RetryStateSaved,
    StatePublished,
    JobSaved,
    JobDeleted,
    JobRefused,
    ScheduleSaved,
    ScheduleFired,
    ScheduleCoalesced,
    HookSaved,
    HookRemoved,
    HookDelivered,
)

# The events that end a run, and the subject kinds they are stored under: its result, or
# its refusal (it never ran). Whoever waits for a run's end, or asks whether it ended, goes
# by these; a cancelled run ends with a RunFinished like any other.
RUN_ENDS: tuple[type[Event], ...] = (RunFinished, RunRefused)
RUN_END_KINDS = tuple(t._kind for t in RUN_ENDS)


# ---- superseded versions: decodable forever, upcast here and nowhere else ----------------


class RunFinishedV1(_RunEvent, frozen=True, kw_only=True, tag="run.finished.v1"):
    """Every node inline, however many (v2 names a blob past a size)."""

    attempt: int
    result: RunResult
    _kind = "finished"


class DeployedV1(_DeployEvent, frozen=True, kw_only=True, tag="deploy.deployed.v1"):
    """Every file inline, however many (v2 names a blob past a size). A frozen copy of its
    fields, not a base of Deployed's: what the current version gains never changes v1."""

    version: str
    bundle_size: int
    manifest_digest: str
    manifest_size: int
    engine: str
    engine_version: str
    adapter: str
    adapter_version: str
    files: list[str]
    skipped: list[Skipped] = []
    requested_by: str = ""
    packages_digest: str | None = None
    _kind = "deployed"


def _as(current: type[Event], old: Event) -> Event:
    """`old` as the `current` type: the same fields, the ones added since at their default."""
    return current(**msgspec.structs.asdict(old))


# Each superseded type and the current type its events are read as.
SUPERSEDED: dict[type[Event], type[Event]] = {RunFinishedV1: RunFinished, DeployedV1: Deployed}

_decoder = msgspec.json.Decoder(Union[(*EVENT_TYPES, *SUPERSEDED)])  # noqa: UP007 - runtime
_encoder = msgspec.json.Encoder()


def encode(event: Event) -> bytes:
    """The event's JSON; raises EventTooLarge past MAX_EVENT_BYTES, naming the event."""
    data = _encoder.encode(event)
    if len(data) > MAX_EVENT_BYTES:
        raise EventTooLarge(
            f"event {event.event_id()} is {len(data)} bytes, over the {MAX_EVENT_BYTES}-byte"
            " limit of one event: what grows with a project belongs in a blob the event names"
        )
    return data


def decode(data: bytes) -> Event:
    """Decode any event version, as its current type; raises msgspec.DecodeError or
    ValidationError naming the field."""
    event = _decoder.decode(data)
    current = SUPERSEDED.get(type(event))
    return event if current is None else _as(current, event)

"""The shapes the query API answers with: one Struct per response body.

Routes build their bodies from projection rows and encode them through `shaped`,
which converts the body into its Struct: a field a route renames, drops or adds
without changing the Struct here is a 500 that the contract test catches, never a
silent change of the API. `/openapi.json` is generated from these same Structs
(services/api/openapi.py), so the published contract is what the routes send.
Every Struct forbids unknown fields, so the document says `additionalProperties:
false` and a client may rely on the field list.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from jetdbt.projections.lag import Lags
from jetdbt.shared.bus.events import CatalogColumn, Threshold
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs.graph import Column, TypedColumn

__all__ = [
    "ApiError",
    "Hook",
    "HookAnswer",
    "HookDeliveries",
    "HookDelivery",
    "Hooks",
    "ColumnEdge",
    "DbtProducer",
    "DeadLetter",
    "DeadLetters",
    "DeclaredProducer",
    "DeclaredWrite",
    "Deploy",
    "DeployAccepted",
    "Deploys",
    "Edge",
    "Environment",
    "Environments",
    "Graph",
    "GraphNode",
    "Health",
    "Lags",
    "LogLine",
    "LogNext",
    "NextAfter",
    "NextOffset",
    "NodeHistory",
    "Overlap",
    "Overlaps",
    "ProjectSummary",
    "ProjectorProcesses",
    "Projects",
    "PromotionAccepted",
    "Promotions",
    "Reader",
    "Relation",
    "RelationNode",
    "RelationRun",
    "RelationWrite",
    "RetryState",
    "RetryStates",
    "Run",
    "RunAccepted",
    "RunLog",
    "RunNode",
    "RunNodeDetail",
    "RunSummary",
    "Runs",
    "SlotVersion",
    "Upstream",
    "Versions",
    "Whoami",
    "shaped",
]


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


def shaped(schema: type, body: Any) -> Any:
    """`body` (dicts, lists, rows' values, Structs read by attribute) as a `schema`; raises
    msgspec.ValidationError naming the field when the route's body and its shape differ."""
    return msgspec.convert(body, schema, from_attributes=True)


class ApiError(_Body):
    """Every 4xx and 5xx: what was wrong, naming the parameter or the resource."""

    error: str


class ProjectorProcesses(_Body):
    """Which projector process folds (null: none holds the lease) and which stand by, by
    name (JETDBT_RUNNER_NAME, else host:pid)."""

    active: str | None
    standbys: list[str]


class Health(_Body):
    ok: bool
    nats: bool
    problems: list[str]
    # The projections a bug in their fold stops (projections/loop.py; why: /v1/projections).
    stopped: list[str] = []
    # The sandbox of the runner in this process (on: what it uses; off; missing: what),
    # null where the API runs without a runner.
    sandbox: str | None = None
    # Null when NATS did not answer in time.
    projectors: ProjectorProcesses | None = None


class NextOffset(_Body):
    """The query of the following page."""

    offset: int


class NextAfter(_Body):
    """The query of a graph's following page: the last node id read."""

    after: str


class RunNode(_Body):
    """One node of a run, live while the run goes: its dbt status and stable outcome."""

    unique_id: str
    resource_type: str | None
    name: str | None
    relation: str | None
    status: str
    outcome: str | None
    message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    execution_time: float | None
    rows_affected: int | None
    failures: int | None
    round: int
    attempt: int
    # The dbt thread that ran it (the viewer's timeline), once the run recorded one.
    thread: str | None = None


class NodeHistory(_Body):
    """The node in one of its project's runs: how it ended and how long it took, and the
    run's command (`show` and `compile` only look at a node; `job`: a saved job's run)."""

    run_id: str
    run_status: str
    command: str | None
    status: str
    outcome: str | None
    execution_time: float | None
    started_at: datetime | None
    finished_at: datetime | None
    requested_at: datetime | None


class RunNodeDetail(_Body):
    """What a run recorded of one node beyond its row (`in_run`: it has one), and the
    node's history over its project's latest runs, newest first."""

    run_id: str
    project: str
    unique_id: str
    in_run: bool
    compiled_code: str | None
    thread: str | None
    history: list[NodeHistory]


class NodeHistories(_Body):
    """A node's history over its project's latest runs, newest first."""

    project: str
    unique_id: str
    history: list[NodeHistory]


class RunSummary(_Body):
    """A run as listed: the command as submitted, the node counts, no nodes."""

    run_id: str
    project: str
    status: str
    command: dict[str, Any] | None
    requested_by: str | None
    requested_at: datetime | None
    hidden: bool
    attempt: int
    lost_attempts: list[int]
    version: str | None
    runner: str | None
    started_at: datetime | None
    finished_at: datetime | None
    refused_reason: str | None
    totals: dict[str, int] | None
    nodes_started: int
    nodes_finished: int
    # Who asked, once identity is recorded: the principal's team and the door it came in by.
    team: str | None = None
    door: str | None = None
    # While it waits to start (status `queued`): why, its place in its queues (1: next),
    # when the wait began; once started, how long it waited.
    queue_reason: str | None = None
    queue_position: int | None = None
    queued_at: datetime | None = None
    queued_seconds: float | None = None
    # The run's kept log (objects named log/<run_id>), and when retention removed its files
    # (kept log, run_results, manifest); a pruned run keeps its status, result and nodes.
    log_object: str | None = None
    log_lines: int | None = None
    log_bytes: int | None = None
    files_pruned_at: datetime | None = None
    # dbt's artifacts the run kept (GET /v1/runs/{run_id}/artifacts/{name}): name -> digest.
    artifacts: dict[str, str] | None = None
    # The saved job the run is of ("": none), and what started it: manual, schedule,
    # relation, after, api or nats ("": a run recorded before triggers were).
    job: str = ""
    trigger: str = ""
    # The project environment it builds in (a run from before environments: the default,
    # prod), and the pull request it checks (0: none).
    environment: str = DEFAULT_ENVIRONMENT
    pr: int = 0


class Run(RunSummary, kw_only=True, forbid_unknown_fields=True):
    """A run with every node; `result` is the stored result without its nodes."""

    result: dict[str, Any] | None
    nodes: list[RunNode]


class ProjectSummary(_Body):
    """A project: the version its default environment runs (before any promotion: its last
    deployed one), when it last deployed one, its latest run, and its latest deploy not
    refused (`failed` with dbt's reason, `requested` while it parses, `deployed`,
    `unchanged`)."""

    project: str
    version: str | None
    deployed_at: datetime | None
    last_run_id: str | None
    last_run_status: str | None
    last_run_finished_at: datetime | None
    last_deploy_id: str | None
    last_deploy_status: str | None
    last_deploy_reason: str | None
    last_deploy_at: datetime | None


class Projects(_Body):
    projects: list[ProjectSummary]
    next: NextOffset | None


class Runs(_Body):
    project: str
    runs: list[RunSummary]
    next: NextOffset | None


class LogLine(_Body):
    line: int
    text: str


class LogNext(_Body):
    """The query of the following page of log lines: the last line number read."""

    after: int


class RunLog(_Body):
    """A page of a run's log lines; `next` stays set while the run goes or lines follow."""

    run_id: str
    project: str
    status: str | None
    source: str
    lines: list[LogLine]
    next: LogNext | None


class JobSchedule(_Body):
    """A job's schedule: active, paused or removed; how often the server fired it, how many
    of those fires joined the run of the previous fire (still queued or running) instead of
    queueing another, the run it started last, and when it fires next (from the server's own
    fire, else told from its cron, from the moment it is active)."""

    state: str
    cron: str
    tz: str
    principal: str
    saved_at: datetime
    fires: int
    coalesced: int
    last_fired_at: datetime | None
    last_run_id: str | None
    next_at: datetime | None


class Job(_Body):
    """A saved job: its spec (jetdbt.shared.bus.commands.JobSpec) and its schedule, if it has
    one."""

    name: str
    spec: dict[str, Any]
    saved_by: str
    saved_at: datetime
    schedule: JobSchedule | None


class Jobs(_Body):
    project: str
    jobs: list[Job]
    next: NextOffset | None


class JobAccepted(_Body):
    """A job command published; the job's facts follow on the log, then in GET .../jobs."""

    project: str
    name: str
    action: str


class Hook(_Body):
    """A webhook (never its secret): where it posts, which run events, of which job."""

    name: str
    url: str
    on: list[str]
    job: str
    saved_by: str
    saved_at: datetime


class Hooks(_Body):
    project: str
    hooks: list[Hook]
    next: NextOffset | None


class HookAnswer(_Body):
    """A hook added (its secret shown this once, never again) or removed."""

    name: str
    url: str = ""
    on: list[str] = []
    job: str = ""
    secret: str = ""
    error: str = ""


class HookDelivery(_Body):
    """One attempt of one delivery: the receiver's HTTP status (0: no answer), state
    (`delivered`, `retrying`, `dead`: the delivery gave up, a dead letter) and, when it
    failed, why: `answered N` or one of a fixed vocabulary (`no HTTP answer`, `timed out`,
    `TLS failed`, ...), never what the receiver sent."""

    delivery_id: str
    attempt: int
    run_id: str
    event: str
    status: int
    state: str
    error: str
    at: datetime


class HookDeliveries(_Body):
    project: str
    hook: str
    deliveries: list[HookDelivery]
    next: NextOffset | None


class RunAccepted(_Body):
    """A run command published: follow it with this run id."""

    run_id: str
    project: str


class Deploy(_Body):
    deploy_id: str
    status: str
    version: str | None
    manifest_digest: str | None
    engine: str | None
    engine_version: str | None
    adapter: str | None
    adapter_version: str | None
    skipped: list[Any] | None
    reason: str | None
    requested_by: str | None
    at: datetime
    team: str | None = None  # the deployer's team, and the door its command came in by
    door: str | None = None
    source: list[str] | None = None  # the folder it came from, as the deploy named it


class DeployAccepted(_Body):
    """A bundle stored and its deploy command published; its outcome follows on the log and
    then in GET .../deploys under `deploy_id` (a refusal before the runner read the command:
    under `command_id`)."""

    deploy_id: str
    project: str
    bundle_digest: str
    command_id: str


class Deploys(_Body):
    project: str
    deploys: list[Deploy]
    next: NextOffset | None


class RetryState(_Body):
    principal: str
    run_id: str
    attempt: int
    version: str
    command: dict[str, Any]
    args: dict[str, Any]
    saved_at: datetime


class RetryStates(_Body):
    project: str
    retry_state: list[RetryState]
    next: NextOffset | None


class Environment(_Body):
    warehouse: str
    target: str
    schema: str
    database: str
    run_id: str
    version: str
    manifest_digest: str
    has_run_results: bool
    published_at: datetime


class Environments(_Body):
    project: str
    environments: list[Environment]
    next: NextOffset | None


class SlotVersion(_Body):
    """What one slot of a project runs: an environment (`prod`), a person's own environment
    (`dev/<principal>`) or a pull request's check (`pr:<n>`), and the promotion that put the
    version there. `previous` is "" when the slot ran nothing before."""

    slot: str
    environment: str
    principal: str
    pr: int
    version: str
    previous: str
    deploy_id: str
    promoted_by: str
    promoted_at: datetime


class Versions(_Body):
    project: str
    versions: list[SlotVersion]
    next: NextOffset | None


class Promotions(_Body):
    """Promotions, newest first: each moved its slot from `previous` to `version`."""

    project: str
    promotions: list[SlotVersion]
    next: NextOffset | None


class PromotionAccepted(_Body):
    """A promote command published; its outcome follows on the log (deploy.promoted, or a
    deploy.refused whose deploy_id is `command_id`) and then in GET .../versions."""

    project: str
    environment: str
    version: str
    command_id: str


class DeclaredWrite(_Body):
    """The latest write another system declared on a relation."""

    producer: str
    status: str
    row_count: int | None
    written_at: datetime


class SourceFreshness(_Body):
    """A source's last freshness check (a `source freshness` run): dbt's status (pass, warn,
    error, runtime error) and its outcome, its newest loaded_at, when dbt looked, the age in
    seconds between the two, the source's own thresholds, and the run that checked it."""

    status: str
    outcome: str
    message: str | None
    max_loaded_at: datetime | None
    snapshotted_at: datetime
    age_seconds: float | None
    warn_after: Threshold | None
    error_after: Threshold | None
    run_id: str


class NodeCatalog(_Body):
    """A node's relation as the last `docs generate` that listed it found it in the warehouse:
    its columns in the warehouse's order, when the catalog was generated and by which run."""

    columns: list[CatalogColumn]
    generated_at: datetime
    run_id: str


class GraphNode(_Body):
    unique_id: str
    resource_type: str
    name: str
    package: str
    relation: str | None
    owned: bool
    materialized: str | None
    tags: list[str]
    description: str
    columns: list[Column]
    column_schema: list[TypedColumn] | None
    test_severity: str | None
    test_kind: str | None
    attached_node: str | None
    raw_code: str
    declared_writes: list[DeclaredWrite]
    # What the warehouse said of the node, kept per project and node whatever the version:
    # a source's last freshness check, and the columns of the last catalog that listed it.
    freshness: SourceFreshness | None
    catalog: NodeCatalog | None
    # Where the viewer draws a model, seed or snapshot: the column of its topological
    # generation in the whole graph, and its place in that column (else null).
    layer: int | None
    row: int | None


class Edge(_Body):
    parent: str
    child: str
    kind: str


class ColumnEdge(_Body):
    from_node: str
    from_column: str
    to_node: str
    to_column: str
    lineage_kind: str


class Graph(_Body):
    """A page of a graph's nodes, with the edges whose child is in the page."""

    project: str
    version: str
    scope: str
    graph_digest: str
    content_digest: str
    relation_root: str
    default_database: str | None
    principal: str
    ingested_at: datetime
    run_id: str | None
    nodes: list[GraphNode]
    edges: list[Edge]
    column_edges: list[ColumnEdge]
    next: NextAfter | None
    # A run's graph only: true when the run stored no snapshot and its version's is served.
    fallback: bool | msgspec.UnsetType = msgspec.UNSET


class RelationNode(_Body):
    project: str
    version: str
    unique_id: str
    resource_type: str
    name: str
    owned: bool
    materialized: str | None


class DbtProducer(_Body, tag_field="kind", tag="dbt"):
    project: str
    unique_id: str


class DeclaredProducer(_Body, tag_field="kind", tag="declared"):
    producer: str
    last_write: DeclaredWrite


class Reader(_Body):
    """A node that reads the relation (downstream), through one of the relation's nodes."""

    project: str
    unique_id: str
    resource_type: str
    name: str
    relation: str | None
    reads_through: str


class Upstream(_Body):
    """A node a producer of the relation reads (a model, a seed, a source)."""

    project: str
    unique_id: str
    resource_type: str
    name: str
    relation: str | None


class RelationWrite(_Body):
    producer: str
    status: str
    row_count: int | None
    written_at: datetime
    refused_reason: str | None


class RelationRun(_Body):
    """A run whose node built the relation: the latest WRITES_SHOWN, unfinished ones first."""

    run_id: str
    project: str
    unique_id: str
    status: str
    outcome: str | None
    finished_at: datetime | None
    # The environment the run built it in, and the pull request it checked (0: none).
    environment: str = DEFAULT_ENVIRONMENT
    pr: int = 0


class Relation(_Body):
    """Who produces and who reads one relation; `truncated` names the lists that were cut."""

    relation: str
    nodes: list[RelationNode]
    producers: list[DbtProducer | DeclaredProducer]
    readers: list[Reader]
    upstream: list[Upstream]
    writes: list[RelationWrite]
    runs: list[RelationRun]
    truncated: list[str]


class Overlap(_Body):
    """Another project of the warehouse that writes relations the project writes too: the
    first of them (sorted) and how many. `project` is None for a project the token may not
    read: its name is not the token's to know, only that the relations are shared."""

    project: str | None
    relations: list[str]
    count: int


class Overlaps(_Body):
    """What the project's latest deployed version writes that other projects' latest
    versions write too (`version` None: nothing deployed yet)."""

    project: str
    version: str | None
    overlaps: list[Overlap]


class Whoami(_Body):
    """The token a request carries: who it speaks for, its team, role and project pattern."""

    id: str
    principal: str
    team: str
    role: str
    project: str
    expires_at: datetime | None


class DeadLetter(_Body):
    id: int
    projector: str
    stream_seq: int
    subject: str
    error: str
    failed_at: datetime
    data: str
    data_size: int


class DeadLetters(_Body):
    dead_letters: list[DeadLetter]
    next: NextOffset | None

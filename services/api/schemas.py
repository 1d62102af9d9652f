"""The shapes the query API answers with: one Struct per response body.

A body read from a projection has its Struct where that projection's queries make it
(projections/<name>/answers.py); the API's own bodies (errors, acceptances, health, logs,
whoami) are defined here, and this module names every one for the routes and the document.
Routes encode their bodies through `shaped`, which converts the body into its Struct: a field a
route renames, drops or adds without changing the Struct is a 500 that the contract test
catches, never a silent change of the API. `/openapi.json` is generated from these same
Structs (services/api/openapi.py), so the published contract is what the routes send.
"""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer, NextAfter, NextOffset, shaped
from jetdbt.projections.catalog.answers import NodeCatalog
from jetdbt.projections.deploys.answers import Deploy, Deploys
from jetdbt.projections.environments.answers import Environment, Environments
from jetdbt.projections.freshness.answers import SourceFreshness
from jetdbt.projections.graph.answers import (
    ColumnEdge,
    DbtProducer,
    DeclaredProducer,
    DeclaredWrite,
    Edge,
    Graph,
    GraphNode,
    Overlap,
    Overlaps,
    Reader,
    Relation,
    RelationNode,
    RelationRun,
    RelationWrite,
    Upstream,
)
from jetdbt.projections.hooks.answers import Hook, HookDeliveries, HookDelivery, Hooks
from jetdbt.projections.jobs.answers import Job, Jobs, JobSchedule
from jetdbt.projections.lag import Lags
from jetdbt.projections.progress.answers import (
    NodeHistories,
    NodeHistory,
    Projects,
    ProjectSummary,
    Run,
    RunNode,
    RunNodeDetail,
    Runs,
    RunSummary,
)
from jetdbt.projections.promotions.answers import Promotions, SlotVersion, Versions
from jetdbt.projections.retry.answers import RetryState, RetryStates
from jetdbt.projections.upkeep.answers import DeadLetter, DeadLetters

__all__ = [
    "ApiError",
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
    "Hook",
    "HookAnswer",
    "HookDeliveries",
    "HookDelivery",
    "Hooks",
    "Job",
    "Jobs",
    "JobSchedule",
    "Lags",
    "LogLine",
    "LogNext",
    "NextAfter",
    "NextOffset",
    "NodeCatalog",
    "NodeHistories",
    "NodeHistory",
    "Overlap",
    "Overlaps",
    "ProjectorProcesses",
    "Projects",
    "ProjectSummary",
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
    "Runs",
    "RunSummary",
    "shaped",
    "SlotVersion",
    "SourceFreshness",
    "Upstream",
    "Versions",
    "Whoami",
]


class ApiError(Answer):
    """Every 4xx and 5xx: what was wrong, naming the parameter or the resource."""

    error: str


class ProjectorProcesses(Answer):
    """Which projector process folds (null: none holds the lease) and which stand by, by
    name (JETDBT_RUNNER_NAME, else host:pid)."""

    active: str | None
    standbys: list[str]


class Health(Answer):
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


class LogLine(Answer):
    line: int
    text: str


class LogNext(Answer):
    """The query of the following page of log lines: the last line number read."""

    after: int


class RunLog(Answer):
    """A page of a run's log lines; `next` stays set while the run goes or lines follow."""

    run_id: str
    project: str
    status: str | None
    source: str
    lines: list[LogLine]
    next: LogNext | None


class JobAccepted(Answer):
    """A job command published; the job's facts follow on the log, then in GET .../jobs."""

    project: str
    name: str
    action: str


class HookAnswer(Answer):
    """A hook added (its secret shown this once, never again) or removed."""

    name: str
    url: str = ""
    on: list[str] = []
    job: str = ""
    secret: str = ""
    error: str = ""


class RunAccepted(Answer):
    """A run command published: follow it with this run id."""

    run_id: str
    project: str


class DeployAccepted(Answer):
    """A bundle stored and its deploy command published; its outcome follows on the log and
    then in GET .../deploys under `deploy_id` (a refusal before the runner read the command:
    under `command_id`)."""

    deploy_id: str
    project: str
    bundle_digest: str
    command_id: str


class PromotionAccepted(Answer):
    """A promote command published; its outcome follows on the log (deploy.promoted, or a
    deploy.refused whose deploy_id is `command_id`) and then in GET .../versions."""

    project: str
    environment: str
    version: str
    command_id: str


class Whoami(Answer):
    """The token a request carries: who it speaks for, its team, role and project pattern."""

    id: str
    principal: str
    team: str
    role: str
    project: str
    expires_at: datetime | None

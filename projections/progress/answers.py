"""What the progress projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jetdbt.projections.answers import Answer, NextOffset
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT

# The fields that are no column of a table (tables.py), with what each is made from.
COMPUTED = {
    "NodeHistory.run_status": "its run's status",
    "RunNodeDetail.in_run": "whether the run reached the node",
    "ProjectSummary.deployed_at": "when the version it runs was deployed",
    "ProjectSummary.last_run_status": "its last run's status",
    "ProjectSummary.last_run_finished_at": "its last run's finished_at",
    "ProjectSummary.last_deploy_id": "its last accepted deploy's deploy_id",
    "ProjectSummary.last_deploy_status": "its last accepted deploy's status",
    "ProjectSummary.last_deploy_reason": "its last accepted deploy's reason",
    "ProjectSummary.last_deploy_at": "its last accepted deploy's at",
}


class RunNode(Answer):
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


class NodeHistory(Answer):
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


class RunNodeDetail(Answer):
    """What a run recorded of one node beyond its row (`in_run`: it has one), and the
    node's history over its project's latest runs, newest first."""

    run_id: str
    project: str
    unique_id: str
    in_run: bool
    compiled_code: str | None
    thread: str | None
    history: list[NodeHistory]


class NodeHistories(Answer):
    """A node's history over its project's latest runs, newest first."""

    project: str
    unique_id: str
    history: list[NodeHistory]


class RunSummary(Answer):
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


class ProjectSummary(Answer):
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


class Projects(Answer):
    projects: list[ProjectSummary]
    next: NextOffset | None


class Runs(Answer):
    project: str
    runs: list[RunSummary]
    next: NextOffset | None

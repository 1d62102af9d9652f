"""The progress projection's reads: runs and their nodes as the API serves them, the projects
list, a run's project for the API's scope check, and the counts `/metrics` reports."""

from __future__ import annotations

import msgspec
from jetdbt.projections.answers import Database, shaped
from jetdbt.projections.progress.answers import (
    NodeHistory,
    ProjectSummary,
    Run,
    RunNodeDetail,
    RunSummary,
)
from jetdbt.projections.progress.tables import (
    COUNT_COLUMNS,
    NODE_COLUMNS,
    NODE_DETAIL_COLUMNS,
    RUN_COLUMNS,
    without_nodes,
)
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT
from jetdbt.shared.runs.run_status import QUEUED, RUNNING

__all__ = [
    "run_project",
    "run_summary",
    "run",
    "runs",
    "run_node",
    "node_history",
    "projects",
    "finished_runs",
    "run_durations",
    "node_durations",
    "queue",
    "team_queues",
    "queue_waits",
]

# A run as listed: its columns without the stored result, with the node counts.
_RUN = ", ".join([c for c in RUN_COLUMNS if c != "result"] + list(COUNT_COLUMNS))
_NODE = ", ".join(c for c in NODE_COLUMNS if c not in ("run_id", *NODE_DETAIL_COLUMNS))
# Runs hidden from listings (a CI check's) are left out of a node's history too.
_HISTORY = (
    "SELECT n.run_id, r.status AS run_status, r.command->>'label' AS command, n.status,"
    " n.outcome, n.execution_time,"
    " n.started_at, n.finished_at, r.requested_at FROM run_nodes n JOIN runs r USING (run_id)"
    " WHERE n.unique_id = $2 AND r.project = $1 AND NOT r.hidden"
    " ORDER BY r.requested_at DESC NULLS LAST, n.run_id LIMIT $3"
)
_PROJECTS = """
SELECT p.project, COALESCE(v.version, d.version) AS version, d.at AS deployed_at,
       r.run_id AS last_run_id,
       r.status AS last_run_status, r.finished_at AS last_run_finished_at,
       l.deploy_id AS last_deploy_id, l.status AS last_deploy_status,
       l.reason AS last_deploy_reason, l.at AS last_deploy_at
FROM (SELECT DISTINCT project FROM deploys WHERE status <> 'refused') p
LEFT JOIN LATERAL (SELECT version, at FROM deploys WHERE project = p.project
                   AND status IN ('deployed', 'unchanged') ORDER BY at DESC LIMIT 1) d ON true
LEFT JOIN LATERAL (SELECT deploy_id, status, reason, at FROM deploys WHERE project = p.project
                   AND status <> 'refused' ORDER BY at DESC, deploy_id LIMIT 1) l ON true
LEFT JOIN environment_versions v ON v.project = p.project AND v.slot = $4
LEFT JOIN LATERAL (SELECT run_id, status, finished_at FROM runs WHERE project = p.project
                   AND NOT hidden AND command->>'bundle_digest' IS NULL
                   ORDER BY requested_at DESC NULLS LAST, run_id LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT team FROM deploys WHERE project = p.project AND team <> ''
                   ORDER BY at DESC LIMIT 1) t ON true
WHERE $1::text IS NULL OR t.team = $1
ORDER BY p.project LIMIT $2 OFFSET $3
"""


class Finished(msgspec.Struct, frozen=True):
    """How many runs of a project ended with a status."""

    project: str
    status: str
    runs: int


class Histogram(msgspec.Struct, frozen=True):
    """How many values are at or below each bound asked for, how many in all, their sum."""

    below: list[int]
    count: int
    sum: float


class Queue(msgspec.Struct, frozen=True):
    """Runs waiting and building now, and how long the oldest waiting one has (0: none)."""

    queued: int
    running: int
    oldest: float


class TeamQueue(msgspec.Struct, frozen=True):
    """A team's runs waiting now (`team` "": runs of no team), and its oldest one's wait."""

    team: str
    queued: int
    oldest: float


async def run_project(db: Database, run_id: str) -> str | None:
    """The project of a run; None for an unknown run."""
    return await db.fetchval("SELECT project FROM runs WHERE run_id = $1", run_id)


async def run_summary(db: Database, run_id: str) -> RunSummary | None:
    """A run as listed (no result, no nodes); None for an unknown run."""
    row = await db.fetchrow(f"SELECT {_RUN} FROM runs WHERE run_id = $1", run_id)
    return None if row is None else shaped(RunSummary, dict(row))


async def run(db: Database, run_id: str) -> Run | None:
    """A run with its result and every node, in the order they started; None for an unknown
    run."""
    row = await db.fetchrow(f"SELECT {_RUN}, result FROM runs WHERE run_id = $1", run_id)
    if row is None:
        return None
    nodes = await db.fetch(
        f"SELECT {_NODE} FROM run_nodes WHERE run_id = $1"
        " ORDER BY started_at NULLS LAST, unique_id",
        run_id,
    )
    body = dict(row)
    # The progress fold stores results without their nodes; rows folded before it did
    # still carry them until a `replay --swap`. The nodes are the run_nodes rows either way.
    body["result"] = without_nodes(body["result"] or {}) or None
    body["nodes"] = [dict(n) for n in nodes]
    return shaped(Run, body)


async def runs(
    db: Database, project: str, limit: int, offset: int, environment: str = "", job: str = ""
) -> list[RunSummary]:
    """A page of a project's runs, newest first (`environment`, `job`: of that one only)."""
    fetched = await db.fetch(
        f"SELECT {_RUN} FROM runs WHERE project = $1 AND ($4 = '' OR environment = $4)"
        " AND ($5 = '' OR job = $5)"
        " ORDER BY requested_at DESC NULLS LAST, run_id LIMIT $2 OFFSET $3",
        project,
        limit,
        offset,
        environment,
        job,
    )
    return [shaped(RunSummary, dict(r)) for r in fetched]


async def node_history(db: Database, project: str, unique_id: str, limit: int) -> list[NodeHistory]:
    """The node in the project's latest `limit` runs that ran it, newest first."""
    fetched = await db.fetch(_HISTORY, project, unique_id, limit)
    return [shaped(NodeHistory, dict(r)) for r in fetched]


async def run_node(db: Database, run_id: str, unique_id: str, limit: int) -> RunNodeDetail | None:
    """What a run recorded of one node beyond its row, and the node's history over `limit`
    runs; None for an unknown run."""
    project = await run_project(db, run_id)
    if project is None:
        return None
    node = await db.fetchrow(
        "SELECT compiled_code, thread FROM run_nodes WHERE run_id = $1 AND unique_id = $2",
        run_id,
        unique_id,
    )
    body = {
        "run_id": run_id,
        "project": project,
        "unique_id": unique_id,
        "in_run": node is not None,
        "compiled_code": node["compiled_code"] if node else None,
        "thread": node["thread"] if node else None,
        "history": await node_history(db, project, unique_id, limit),
    }
    return shaped(RunNodeDetail, body)


async def projects(db: Database, team: str | None, limit: int, offset: int) -> list[ProjectSummary]:
    """A page of the projects a deploy was accepted under, by name (`team`: that team's only),
    each with its default environment's version, its last run and its last deploy."""
    fetched = await db.fetch(_PROJECTS, team, limit, offset, DEFAULT_ENVIRONMENT)
    return [shaped(ProjectSummary, dict(r)) for r in fetched]


async def finished_runs(db: Database) -> list[Finished]:
    """Runs that ended, counted by project and status."""
    fetched = await db.fetch(
        "SELECT project, status, count(*) AS n FROM runs WHERE finished_at IS NOT NULL"
        " GROUP BY project, status ORDER BY project, status"
    )
    return [Finished(r["project"], r["status"], r["n"]) for r in fetched]


async def _histogram(
    db: Database, value: str, table: str, where: str, bounds: tuple[float, ...]
) -> Histogram:
    """`value` of `table`'s rows `where` holds, in one scan."""
    below = ", ".join(
        f"count(*) FILTER (WHERE {value} <= ${i}) AS le{i}" for i in range(1, len(bounds) + 1)
    )
    row = await db.fetchrow(
        f"SELECT {below}, count(*) AS count, coalesce(sum({value}), 0) AS sum"
        f" FROM {table} WHERE {where}",
        *bounds,
    )
    counts = [row[f"le{i}"] for i in range(1, len(bounds) + 1)]
    return Histogram(counts, row["count"], float(row["sum"]))


async def run_durations(db: Database, bounds: tuple[float, ...]) -> Histogram:
    """How long runs that ended took from start to end, in seconds."""
    return await _histogram(
        db,
        "extract(epoch FROM finished_at - started_at)",
        "runs",
        "finished_at IS NOT NULL AND started_at IS NOT NULL",
        bounds,
    )


async def node_durations(db: Database, bounds: tuple[float, ...]) -> Histogram:
    """How long dbt took for each node it ran (its execution_time), in seconds."""
    return await _histogram(db, "execution_time", "run_nodes", "execution_time IS NOT NULL", bounds)


async def queue_waits(db: Database, bounds: tuple[float, ...]) -> Histogram:
    """How long runs that started had waited in the queue, in seconds."""
    return await _histogram(db, "queued_seconds", "runs", "queued_seconds IS NOT NULL", bounds)


async def queue(db: Database) -> Queue:
    """The queue now."""
    row = await db.fetchrow(
        f"SELECT count(*) FILTER (WHERE status = '{QUEUED}') AS queued,"
        f" count(*) FILTER (WHERE status = '{RUNNING}') AS running,"
        " coalesce(max(extract(epoch FROM now() - queued_at))"
        f" FILTER (WHERE status = '{QUEUED}'), 0) AS oldest FROM runs"
    )
    return Queue(row["queued"], row["running"], float(row["oldest"]))


async def team_queues(db: Database) -> list[TeamQueue]:
    """Each team's queue now, by team (a team with no run waiting: absent)."""
    fetched = await db.fetch(
        "SELECT coalesce(team, '') AS team, count(*) AS queued,"
        " coalesce(extract(epoch FROM now() - min(queued_at)), 0) AS oldest"
        f" FROM runs WHERE status = '{QUEUED}' GROUP BY 1 ORDER BY 1"
    )
    return [TeamQueue(r["team"], r["queued"], float(r["oldest"])) for r in fetched]

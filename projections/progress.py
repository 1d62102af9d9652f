"""Progress fold: run and node events into `runs` and `run_nodes`.

Every statement is an upsert that never moves a row backwards (a late duplicate
of an earlier round or a started-after-finished is ignored), so an event folded
twice changes nothing. Node events, most of the log, are folded a batch at a
time: within a stretch between run events, starts go before finishes (the
guards make that the same as stream order) and each kind is one pipelined
statement; the per-run counters are then recounted once, never incremented,
so nothing can count twice.
"""

from __future__ import annotations

import msgspec

from shared import events as ev

__all__ = ["ProgressFold"]

_NODE_STARTED = (
    "INSERT INTO run_nodes (run_id, unique_id, resource_type, name, relation, status,"
    " started_at, round, attempt) VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8)"
    " ON CONFLICT (run_id, unique_id) DO UPDATE SET status = 'running',"
    " started_at = EXCLUDED.started_at, finished_at = NULL, outcome = NULL,"
    " round = EXCLUDED.round, attempt = EXCLUDED.attempt"
    " WHERE (run_nodes.round, run_nodes.attempt) < (EXCLUDED.round, EXCLUDED.attempt)"
)

# A result dbt reports no finish time for (a skipped node) is stamped with the event's
# time, never the clock, so a replay folds exactly the same row.
_NODE_FINISHED = (
    "INSERT INTO run_nodes (run_id, unique_id, resource_type, name, relation, status,"
    " outcome, message, started_at, finished_at, execution_time, rows_affected, failures,"
    " round, attempt) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,"
    "COALESCE($10, $16::timestamptz),$11,$12,$13,$14,$15)"
    " ON CONFLICT (run_id, unique_id) DO UPDATE SET"
    " resource_type = COALESCE(NULLIF(EXCLUDED.resource_type, ''), run_nodes.resource_type),"
    " name = COALESCE(NULLIF(EXCLUDED.name, ''), run_nodes.name),"
    " relation = COALESCE(EXCLUDED.relation, run_nodes.relation),"
    " status = EXCLUDED.status, outcome = EXCLUDED.outcome, message = EXCLUDED.message,"
    " started_at = COALESCE(EXCLUDED.started_at, run_nodes.started_at),"
    " finished_at = EXCLUDED.finished_at, execution_time = EXCLUDED.execution_time,"
    " rows_affected = EXCLUDED.rows_affected, failures = EXCLUDED.failures,"
    " round = EXCLUDED.round, attempt = EXCLUDED.attempt"
    " WHERE (run_nodes.round, run_nodes.attempt) <= (EXCLUDED.round, EXCLUDED.attempt)"
)

_RECOUNT = (
    "UPDATE runs SET nodes_started = c.started, nodes_finished = c.finished"
    " FROM (SELECT run_id, count(*) AS started, count(finished_at) AS finished"
    " FROM run_nodes WHERE run_id = ANY($1::text[]) GROUP BY run_id) AS c"
    " WHERE runs.run_id = c.run_id"
)


def _finished_args(run_id: str, attempt: int, n: ev.NodeResult, at) -> tuple:
    return (
        run_id,
        n.unique_id,
        n.resource_type,
        n.name,
        n.relation,
        n.status,
        n.outcome,
        n.message,
        n.started_at,
        n.finished_at,
        n.execution_time,
        n.rows_affected,
        n.failures,
        n.round,
        attempt,
        at,
    )


class _Batch:
    """Node rows waiting to be written, and the runs whose counters they move."""

    def __init__(self):
        self.started: list[tuple] = []
        self.finished: list[tuple] = []
        self.runs: set[str] = set()

    async def flush(self, conn) -> None:
        if self.started:
            await conn.executemany(_NODE_STARTED, self.started)
        if self.finished:
            await conn.executemany(_NODE_FINISHED, self.finished)
        self.started, self.finished = [], []


class ProgressFold:
    name = "progress"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        await self.apply_many(conn, [(event, seq)])

    async def apply_many(self, conn, items: list[tuple[ev.Event, int]]) -> None:
        batch = _Batch()
        for event, _ in items:
            if isinstance(event, ev.NodeStarted):
                batch.started.append(
                    (
                        event.run_id,
                        event.unique_id,
                        event.resource_type,
                        event.name,
                        event.relation,
                        event.started_at or event.at,
                        event.round,
                        event.attempt,
                    )
                )
                batch.runs.add(event.run_id)
            elif isinstance(event, ev.NodeFinished):
                batch.finished.append(
                    _finished_args(event.run_id, event.attempt, event.node, event.at)
                )
                batch.runs.add(event.run_id)
            elif type(event) in self._handlers:
                await batch.flush(conn)
                await self._handlers[type(event)](self, conn, event)
                if isinstance(event, ev.RunFinished):
                    batch.finished.extend(
                        _finished_args(event.run_id, event.attempt, node, event.at)
                        for node in event.result.nodes
                    )
                    batch.runs.add(event.run_id)
        await batch.flush(conn)
        if batch.runs:
            await conn.execute(_RECOUNT, sorted(batch.runs))

    async def _requested(self, conn, e: ev.RunRequested) -> None:
        await conn.execute(
            "INSERT INTO runs (run_id, project, status, command, requested_by, requested_at,"
            " hidden) VALUES ($1, $2, 'requested', $3, $4, $5, $6)"
            " ON CONFLICT (run_id) DO UPDATE SET"
            " command = EXCLUDED.command, requested_by = EXCLUDED.requested_by,"
            " requested_at = EXCLUDED.requested_at, hidden = EXCLUDED.hidden",
            e.run_id,
            e.project,
            e.command,
            e.requested_by,
            e.requested_at or e.at,
            e.hidden,
        )

    async def _refused(self, conn, e: ev.RunRefused) -> None:
        await conn.execute(
            "INSERT INTO runs (run_id, project, status, refused_reason, requested_at, finished_at)"
            " VALUES ($1, $2, 'refused', $3, $4, $4) ON CONFLICT (run_id) DO UPDATE SET"
            " status = 'refused', refused_reason = EXCLUDED.refused_reason,"
            " finished_at = EXCLUDED.finished_at",
            e.run_id,
            e.project,
            e.reason,
            e.at,
        )

    async def _started(self, conn, e: ev.RunStarted) -> None:
        await conn.execute(
            "INSERT INTO runs (run_id, project, status, attempt, version, runner, started_at,"
            " requested_at) VALUES ($1, $2, 'running', $3, $4, $5, $6, $6)"
            " ON CONFLICT (run_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
            " version = EXCLUDED.version, runner = EXCLUDED.runner,"
            " started_at = COALESCE(runs.started_at, EXCLUDED.started_at),"
            " status = CASE WHEN runs.finished_at IS NULL THEN 'running' ELSE runs.status END"
            " WHERE runs.attempt <= EXCLUDED.attempt",
            e.run_id,
            e.project,
            e.attempt,
            e.version,
            e.runner,
            e.at,
        )

    async def _lost(self, conn, e: ev.RunAttemptLost) -> None:
        await conn.execute(
            "UPDATE runs SET lost_attempts = array_append(lost_attempts, $2)"
            " WHERE run_id = $1 AND NOT ($2 = ANY(lost_attempts))",
            e.run_id,
            e.attempt,
        )

    async def _finished(self, conn, e: ev.RunFinished) -> None:
        """The run row; its node results follow in the same batch (see apply_many)."""
        r = e.result
        await conn.execute(
            "INSERT INTO runs (run_id, project, status, attempt, finished_at, totals, result,"
            " requested_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $5)"
            " ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status,"
            " attempt = GREATEST(runs.attempt, EXCLUDED.attempt),"
            " finished_at = EXCLUDED.finished_at, totals = EXCLUDED.totals,"
            " result = EXCLUDED.result",
            e.run_id,
            e.project,
            r.status,
            e.attempt,
            e.at,
            r.totals,
            msgspec.to_builtins(r),
        )

    _handlers = {
        ev.RunRequested: _requested,
        ev.RunRefused: _refused,
        ev.RunStarted: _started,
        ev.RunAttemptLost: _lost,
        ev.RunFinished: _finished,
    }

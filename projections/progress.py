"""Progress fold: run and node events into `runs` and `run_nodes`.

Every statement is an upsert that never moves a row backwards (a late duplicate
of an earlier round or a started-after-finished is ignored), so an event folded
twice changes nothing.
"""

from __future__ import annotations

import msgspec

from shared import events as ev

__all__ = ["ProgressFold"]


def _plain(value):
    return msgspec.to_builtins(value)


class ProgressFold:
    name = "progress"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            await handler(self, conn, event)

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
            _plain(r),
        )
        for node in r.nodes:
            await self._node(conn, e.run_id, e.attempt, node, e.at)

    async def _node_started(self, conn, e: ev.NodeStarted) -> None:
        inserted = await conn.fetchval(
            "INSERT INTO run_nodes (run_id, unique_id, resource_type, name, relation, status,"
            " started_at, round, attempt) VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8)"
            " ON CONFLICT (run_id, unique_id) DO UPDATE SET status = 'running',"
            " started_at = EXCLUDED.started_at, finished_at = NULL, outcome = NULL,"
            " round = EXCLUDED.round, attempt = EXCLUDED.attempt"
            " WHERE (run_nodes.round, run_nodes.attempt) < (EXCLUDED.round, EXCLUDED.attempt)"
            " RETURNING xmax = 0",
            e.run_id,
            e.unique_id,
            e.resource_type,
            e.name,
            e.relation,
            e.started_at or e.at,
            e.round,
            e.attempt,
        )
        if inserted:
            await conn.execute(
                "UPDATE runs SET nodes_started = nodes_started + 1 WHERE run_id = $1", e.run_id
            )

    async def _node_finished(self, conn, e: ev.NodeFinished) -> None:
        await self._node(conn, e.run_id, e.attempt, e.node, e.at)

    async def _node(self, conn, run_id: str, attempt: int, n: ev.NodeResult, at) -> None:
        """A node result; one dbt reports no finish time for (skipped) is stamped with the
        event's time, never the clock, so a replay folds exactly the same row."""
        # `was_finished` is read before the upsert so the counter moves once per node.
        was_finished = await conn.fetchval(
            "SELECT finished_at IS NOT NULL FROM run_nodes WHERE run_id = $1 AND unique_id = $2",
            run_id,
            n.unique_id,
        )
        changed = await conn.fetchval(
            "INSERT INTO run_nodes (run_id, unique_id, resource_type, name, relation, status,"
            " outcome, message, started_at, finished_at, execution_time, rows_affected, failures,"
            " round, attempt) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,"
            "COALESCE($10, $16::timestamptz),$11,$12,$13,$14,$15)"
            " ON CONFLICT (run_id, unique_id) DO UPDATE SET"
            " resource_type = COALESCE(NULLIF(EXCLUDED.resource_type, ''),"
            " run_nodes.resource_type),"
            " name = COALESCE(NULLIF(EXCLUDED.name, ''), run_nodes.name),"
            " relation = COALESCE(EXCLUDED.relation, run_nodes.relation),"
            " status = EXCLUDED.status, outcome = EXCLUDED.outcome, message = EXCLUDED.message,"
            " started_at = COALESCE(EXCLUDED.started_at, run_nodes.started_at),"
            " finished_at = EXCLUDED.finished_at, execution_time = EXCLUDED.execution_time,"
            " rows_affected = EXCLUDED.rows_affected, failures = EXCLUDED.failures,"
            " round = EXCLUDED.round, attempt = EXCLUDED.attempt"
            " WHERE (run_nodes.round, run_nodes.attempt) <= (EXCLUDED.round, EXCLUDED.attempt)"
            " RETURNING true",
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
        if changed and not was_finished:
            await conn.execute(
                "UPDATE runs SET nodes_finished = nodes_finished + 1 WHERE run_id = $1", run_id
            )

    _handlers = {
        ev.RunRequested: _requested,
        ev.RunRefused: _refused,
        ev.RunStarted: _started,
        ev.RunAttemptLost: _lost,
        ev.RunFinished: _finished,
        ev.NodeStarted: _node_started,
        ev.NodeFinished: _node_finished,
    }

"""Progress fold (projection `progress`): run and node events into the tables `runs` and
`run_nodes` (projections/progress/tables.py), what GET /v1/runs/{run_id} and GET
/v1/projects/{project}/runs read.

A batch is folded in memory: the rows it touches are read once, every event is
applied to them in stream order, and each changed row is written once, one
statement per table. Round trips, not rows, are what a replay pays for. The
rules below never move a row backwards (a late duplicate of an earlier round, a
start after its finish), so an event folded twice changes nothing; the per-run
node counters are counted from the stored nodes as the run row is written,
never incremented.
"""

from __future__ import annotations

import msgspec
from jetdbt.projections.progress.tables import (
    COUNT_COLUMNS,
    JSON_COLUMNS,
    NODE_COLUMNS,
    RUN_COLUMNS,
    without_nodes,
)
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.project.descriptor import environment_name
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.outcomes import NODE_RUNNING, precedence

__all__ = ["ProgressFold"]


def _replace(columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    return ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in key)


# Rows travel as one JSON document that Postgres unpacks by column name: encoding it is
# one msgspec call, where binding column arrays costs the client a check per value.
_WRITE_NODES = (
    "INSERT INTO run_nodes SELECT * FROM json_populate_recordset(NULL::run_nodes, $1::text::json)"
    f" ON CONFLICT (run_id, unique_id) DO UPDATE SET"
    f" {_replace(NODE_COLUMNS, ('run_id', 'unique_id'))}"
)
# Nodes are written first, so the counts include this batch.
_WRITE_RUNS = (
    f"INSERT INTO runs ({', '.join(RUN_COLUMNS + COUNT_COLUMNS)})"
    f" SELECT {', '.join(f'r.{c}' for c in RUN_COLUMNS)}, c.started, c.finished"
    " FROM json_populate_recordset(NULL::runs, $1::text::json) AS r"
    " CROSS JOIN LATERAL (SELECT count(*) AS started, count(n.finished_at) AS finished"
    " FROM run_nodes n WHERE n.run_id = r.run_id) AS c"
    f" ON CONFLICT (run_id) DO UPDATE SET {_replace(RUN_COLUMNS + COUNT_COLUMNS, ('run_id',))}"
)
_READ_NODES = (
    f"SELECT {', '.join(f'n.{c}' for c in NODE_COLUMNS)} FROM run_nodes n"
    " JOIN unnest($1::text[], $2::text[]) AS k(run_id, unique_id)"
    " ON n.run_id = k.run_id AND n.unique_id = k.unique_id"
)
_READ_RUNS = (
    f"SELECT {', '.join(f'{c}::text AS {c}' if c in JSON_COLUMNS else c for c in RUN_COLUMNS)}"
    " FROM runs WHERE run_id = ANY($1::text[])"
)


def _json(value) -> msgspec.Raw:
    """A jsonb column's value, kept as encoded JSON until the row is written."""
    return msgspec.Raw(msgspec.json.encode(value))


def _prefer(value, old: dict, column: str):
    """The event's value, or the row's when the event carries none."""
    return value if value else old.get(column, value)


def _rank(row: dict) -> tuple[int, int]:
    return precedence(row["attempt"], row["round"])


def _node_started(row: dict | None, e: ev.NodeStarted) -> dict | None:
    """A fresh running row, unless the row already ranks at this start or above."""
    if row is not None and _rank(row) >= precedence(e.attempt, e.round):
        return None
    old = row or {}
    return {
        "run_id": e.run_id,
        "unique_id": e.unique_id,
        "resource_type": _prefer(e.resource_type, old, "resource_type"),
        "name": _prefer(e.name, old, "name"),
        "relation": _prefer(e.relation, old, "relation"),
        "status": NODE_RUNNING,
        "outcome": None,
        "message": None,
        "started_at": e.started_at or e.at,
        "finished_at": None,
        "execution_time": None,
        "rows_affected": None,
        "failures": None,
        "round": e.round,
        "attempt": e.attempt,
        "thread": None,
        "compiled_code": None,
    }


def _node_finished(
    row: dict | None, run_id: str, attempt_number: int, n: ev.NodeResult, at
) -> dict | None:
    """The result, unless the row ranks above it. A result dbt reports no finish time for
    (a skipped node) is stamped with the event's time, never the clock, so a replay folds
    exactly the same row."""
    if row is not None and _rank(row) > precedence(attempt_number, n.round):
        return None
    old = row or {}
    return {
        "run_id": run_id,
        "unique_id": n.unique_id,
        "resource_type": _prefer(n.resource_type, old, "resource_type"),
        "name": _prefer(n.name, old, "name"),
        "relation": _prefer(n.relation, old, "relation"),
        "status": n.status,
        "outcome": n.outcome,
        "message": n.message,
        "started_at": _prefer(n.started_at, old, "started_at"),
        "finished_at": n.finished_at or at,
        "execution_time": n.execution_time,
        "rows_affected": n.rows_affected,
        "failures": n.failures,
        "round": n.round,
        "attempt": attempt_number,
        "thread": _prefer(n.thread, old, "thread"),
        "compiled_code": _prefer(n.compiled_code, old, "compiled_code"),
    }


def _new_run(e: ev.Event, status: str, requested_at) -> dict:
    return {
        "run_id": e.run_id,
        "project": e.project,
        "status": status,
        "command": None,
        "job": "",
        "trigger": "",
        "environment": environment_name(""),
        "pr": 0,
        "requested_by": None,
        "team": None,
        "door": None,
        "requested_at": requested_at,
        "hidden": False,
        "attempt": 0,
        "lost_attempts": [],
        "version": None,
        "runner": None,
        "started_at": None,
        "finished_at": None,
        "refused_reason": None,
        "totals": None,
        "result": None,
        "log_object": None,
        "log_lines": None,
        "log_bytes": None,
        "files_pruned_at": None,
        "queue_reason": None,
        "queue_position": None,
        "queued_at": None,
        "queued_seconds": None,
        "artifacts": None,
    }


def _requested(row: dict | None, e: ev.RunRequested) -> dict:
    row = row or _new_run(e, run_status.REQUESTED, None)
    row.update(
        command=_json(e.command),
        requested_by=e.requested_by,
        team=e.team or None,
        door=e.door or None,
        requested_at=e.requested_at or e.at,
        hidden=e.hidden,
        job=e.job,
        trigger=e.trigger,
        environment=environment_name(e.environment),
        pr=e.pr,
    )
    return row


def _refused(row: dict | None, e: ev.RunRefused) -> dict:
    row = row or _new_run(e, run_status.REFUSED, e.at)
    row.update(status=run_status.REFUSED, refused_reason=e.reason, finished_at=e.at)
    return row


def _queued(row: dict | None, e: ev.RunQueued) -> dict:
    """An attempt that has not started waits: queued, with why and where. A queued event
    of an attempt that started already, or of a finished run, arrives late: it changes
    nothing."""
    row = row or _new_run(e, run_status.QUEUED, None)
    if row["finished_at"] is None and row["attempt"] < e.attempt:
        if row["status"] != run_status.QUEUED:  # a new wait begins
            row["queued_at"] = e.at
        row.update(
            status=run_status.QUEUED,
            queue_reason=e.reason,
            queue_position=e.position,
            team=row.get("team") or e.team or None,
        )
    return row


def _started(row: dict | None, e: ev.RunStarted) -> dict:
    """A later attempt takes the row over; an earlier one's start arriving late does not.
    A run that was queued records how long it waited."""
    row = row or _new_run(e, run_status.RUNNING, e.at)
    if row["attempt"] <= e.attempt:
        if row["status"] == run_status.QUEUED and row["queued_at"] is not None:
            # Runners' clocks may differ a little: a wait is never negative.
            row["queued_seconds"] = max(0.0, (e.at - row["queued_at"]).total_seconds())
        row.update(
            queue_position=None,
            attempt=e.attempt,
            version=e.version,
            runner=e.runner,
            started_at=row["started_at"] or e.at,
            status=run_status.RUNNING if row["finished_at"] is None else row["status"],
        )
    return row


def _lost(row: dict | None, e: ev.RunAttemptLost) -> dict | None:
    if row is not None and e.attempt not in row["lost_attempts"]:
        row["lost_attempts"] = [*row["lost_attempts"], e.attempt]
    return row


def _finished(row: dict | None, e: ev.RunFinished) -> dict:
    r = e.result
    row = row or _new_run(e, r.status, e.at)
    row.update(
        status=r.status,
        attempt=max(row["attempt"], e.attempt),
        finished_at=e.at,
        totals=_json(r.totals),
        result=_json(without_nodes(msgspec.to_builtins(r))),
    )
    return row


def _log_kept(row: dict | None, e: ev.RunLogKept) -> dict | None:
    """The kept log of the latest attempt that kept one: a later attempt's holds every
    line of the earlier ones, so the longest wins, whatever order duplicates arrive in."""
    if row is not None and (row["log_lines"] or 0) <= e.lines:
        row.update(log_object=e.object, log_lines=e.lines, log_bytes=e.bytes)
        row["artifacts"] = _json(e.artifacts) if e.artifacts else row["artifacts"]
    return row


def _pruned(row: dict | None, e: ev.RunPruned) -> dict | None:
    """Retention removed the run's files; its status, result and nodes stay."""
    if row is not None and row["files_pruned_at"] is None:
        row["files_pruned_at"] = e.at
    return row


_RUN_RULES = {
    ev.RunRequested: _requested,
    ev.RunRefused: _refused,
    ev.RunQueued: _queued,
    ev.RunStarted: _started,
    ev.RunAttemptLost: _lost,
    ev.RunFinished: _finished,
    ev.RunLogKept: _log_kept,
    ev.RunPruned: _pruned,
}


class _Rows:
    """The rows one batch touches: read once, changed in memory, written once."""

    def __init__(self, runs: dict[str, dict], nodes: dict[tuple[str, str], dict]):
        self.runs = runs
        self.nodes = nodes
        self.changed: set[tuple[str, str]] = set()

    @classmethod
    async def read(cls, conn, items: list[ev.Event]) -> _Rows:
        run_ids, keys = set(), set()
        for e in items:
            run_ids.add(e.run_id)
            kind = type(e)
            if kind is ev.NodeStarted:
                keys.add((e.run_id, e.unique_id))
            elif kind is ev.NodeFinished:
                keys.add((e.run_id, e.node.unique_id))
            elif kind is ev.RunFinished:
                keys.update((e.run_id, n.unique_id) for n in e.result.nodes)
        runs = {}
        for r in await conn.fetch(_READ_RUNS, list(run_ids)):
            row = runs[r["run_id"]] = dict(r)
            for c in JSON_COLUMNS:
                row[c] = None if row[c] is None else msgspec.Raw(row[c])
        nodes = {}
        if keys:
            found = await conn.fetch(_READ_NODES, [k[0] for k in keys], [k[1] for k in keys])
            nodes = {(r["run_id"], r["unique_id"]): dict(r) for r in found}
        return cls(runs, nodes)

    def _put(self, key: tuple[str, str], row: dict | None) -> None:
        if row is not None and row != self.nodes.get(key):
            self.nodes[key] = row
            self.changed.add(key)

    def apply(self, e: ev.Event) -> None:
        kind = type(e)
        if kind is ev.NodeStarted:
            key = (e.run_id, e.unique_id)
            self._put(key, _node_started(self.nodes.get(key), e))
        elif kind is ev.NodeFinished:
            key = (e.run_id, e.node.unique_id)
            self._put(key, _node_finished(self.nodes.get(key), e.run_id, e.attempt, e.node, e.at))
        else:
            row = _RUN_RULES[kind](self.runs.get(e.run_id), e)
            if row is not None:
                self.runs[e.run_id] = row
            if kind is ev.RunFinished:
                for n in e.result.nodes:
                    key = (e.run_id, n.unique_id)
                    self._put(
                        key, _node_finished(self.nodes.get(key), e.run_id, e.attempt, n, e.at)
                    )

    async def write(self, conn) -> None:
        if self.changed:
            rows = [self.nodes[k] for k in sorted(self.changed)]
            await conn.execute(_WRITE_NODES, msgspec.json.encode(rows).decode())
        if self.runs:
            rows = [self.runs[k] for k in sorted(self.runs)]
            await conn.execute(_WRITE_RUNS, msgspec.json.encode(rows).decode())


_FOLDED = {*_RUN_RULES, ev.NodeStarted, ev.NodeFinished}


class ProgressFold:
    """Reads the blob a large run's RunFinished keeps its nodes in (reading, not publishing)."""

    name = "progress"

    def __init__(self, bus: Bus | None = None):
        self.bus = bus

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        await self.apply_many(conn, [(event, seq)])

    async def apply_many(self, conn, items: list[tuple[ev.Event, int]]) -> None:
        folded = [await event_blobs.resolved(self.bus, e) for e, _ in items if type(e) in _FOLDED]
        if not folded:
            return
        rows = await _Rows.read(conn, folded)
        for e in folded:
            rows.apply(e)
        await rows.write(conn)

"""dbt's structured output mapped to jetdbt's node results.

Two sources, one shape: NodeStart/NodeFinished from the JSON log while dbt runs
(live progress), and run_results.json + manifest.json when it ends (the
authoritative result). Reading optional metadata never fails a run.

Each invocation's run_results.json names only what it ran, so an attempt's
invocations are overlaid: the run's result lists every node it touched with its
last outcome, and the merged run_results.json is what a later `dbt retry`
resumes from.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import msgspec
from jetdbt.shared.bus.events import Freshness, NodeResult, Threshold
from jetdbt.shared.runs.outcomes import NODE_NOT_RUN, outcome
from jetdbt.shared.runs.planned import Planned
from jetdbt.shared.wording.ages import age
from jetdbt.shared.wording.short_quote import shorten

__all__ = [
    "NODE_EVENTS",
    "NodeStart",
    "Overlay",
    "logged_at",
    "node_start",
    "node_finished",
    "from_artifacts",
    "freshness_as_results",
    "show_rows",
]

NODE_START = "NodeStart"
NODE_FINISHED = "NodeFinished"
SHOW_NODE = "ShowNode"
# The dbt events a run's live progress is made of, and a show's rows: the warm dbt sends
# only these.
NODE_EVENTS = (NODE_START, NODE_FINISHED, SHOW_NODE)
# A show's preview travels in its run's result: cut to this many encoded bytes.
PREVIEW_BYTES = 64 * 1024
# A node's message is kept to this many characters: a database error that quotes a whole
# query must not make its node event, or the run's result, grow without bound.
MESSAGE_LIMIT = 16 * 1024
# A node's compiled SQL is kept to this many characters (its head and its tail): enough for
# any hand-written model, bounded for a generated one.
COMPILED_LIMIT = 64 * 1024


def _time(value: str | None) -> datetime | None:
    """dbt writes both naive (UTC) and Z-suffixed stamps; an empty string means unknown."""
    if not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _int(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _timing(timing: list[dict] | None) -> tuple[datetime | None, datetime | None]:
    """The span of a node's timing entries (compile through execute)."""
    entries = [t for t in timing or [] if t.get("started_at")]
    if not entries:
        return None, None
    return _time(entries[0].get("started_at")), _time(entries[-1].get("completed_at"))


def logged_at(record: dict) -> datetime:
    """When dbt logged a record (now, if it does not say): a node event's own time, later
    than the node's timing (dbt logs NodeFinished once it has released the connection)."""
    return _time(record.get("info", {}).get("ts")) or datetime.now(UTC)


class NodeStart(msgspec.Struct, frozen=True, kw_only=True):
    """What a NodeStart log record says, before it becomes a NodeStarted event."""

    unique_id: str
    resource_type: str
    name: str
    relation: str | None
    started_at: datetime | None


def node_start(record: dict) -> NodeStart | None:
    """A NodeStart log record, or None for any other record."""
    if record.get("info", {}).get("name") != NODE_START:
        return None
    info = record.get("data", {}).get("node_info", {})
    return NodeStart(
        unique_id=info.get("unique_id", ""),
        resource_type=info.get("resource_type", ""),
        name=info.get("node_name", ""),
        relation=(info.get("node_relation") or {}).get("relation_name"),
        started_at=_time(info.get("node_started_at")),
    )


def node_finished(record: dict, round_: int = 0) -> NodeResult | None:
    """A NodeFinished log record as a NodeResult, or None for any other record."""
    if record.get("info", {}).get("name") != NODE_FINISHED:
        return None
    data = record.get("data", {})
    info = data.get("node_info", {})
    result = data.get("run_result", {})
    status = result.get("status") or info.get("node_status") or ""
    started, finished = _timing(result.get("timing_info"))
    return NodeResult(
        unique_id=info.get("unique_id", ""),
        status=status,
        outcome=outcome(status),
        resource_type=info.get("resource_type", ""),
        name=info.get("node_name", ""),
        relation=(info.get("node_relation") or {}).get("relation_name"),
        message=_message(result.get("message")),
        execution_time=result.get("execution_time"),
        rows_affected=_int((result.get("adapter_response") or {}).get("rows_affected")),
        failures=_int(result.get("num_failures")),
        started_at=started or _time(info.get("node_started_at")),
        finished_at=finished or _time(info.get("node_finished_at")),
        round=round_,
        thread=result.get("thread") or result.get("thread_id") or None,
    )


def _message(value, limit: int = MESSAGE_LIMIT) -> str | None:
    """dbt's text for a node, cut to `limit` characters (its head and its tail)."""
    return None if value is None else shorten(str(value), limit)


def _threshold(value) -> Threshold | None:
    """A freshness criterion ({count, period}); None when unset or not of that shape."""
    if not isinstance(value, dict) or not isinstance(value.get("period"), str):
        return None
    count = _int(value.get("count"))
    return None if not count else Threshold(count=count, period=shorten(value["period"], 32))


def _freshness(r: dict) -> Freshness | None:
    """A sources.json entry's freshness (None for a run_results.json entry). Each field is
    read on its own: one dbt wrote in a shape this does not know is left unset."""
    if "max_loaded_at" not in r and "criteria" not in r:
        return None
    criteria = r.get("criteria") if isinstance(r.get("criteria"), dict) else {}
    age = r.get("max_loaded_at_time_ago_in_s")
    return Freshness(
        max_loaded_at=_time(_text(r.get("max_loaded_at"))),
        snapshotted_at=_time(_text(r.get("snapshotted_at"))),
        age_seconds=float(age) if isinstance(age, int | float) and math.isfinite(age) else None,
        warn_after=_threshold(criteria.get("warn_after")),
        error_after=_threshold(criteria.get("error_after")),
    )


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def from_artifacts(run_results: dict, manifest: dict | None, round_: int = 0) -> list[NodeResult]:
    """Every node in run_results.json, named and typed from the manifest when it is there."""
    nodes = (manifest or {}).get("nodes", {})
    out = []
    for r in run_results.get("results", []):
        uid = r.get("unique_id", "")
        node = nodes.get(uid, {})
        started, finished = _timing(r.get("timing"))
        status = r.get("status") or ""
        out.append(
            NodeResult(
                unique_id=uid,
                status=status,
                outcome=outcome(status),
                resource_type=node.get("resource_type", uid.split(".", 1)[0]),
                name=node.get("name", uid.rsplit(".", 1)[-1]),
                relation=node.get("relation_name"),
                message=_message(r.get("message")),
                execution_time=r.get("execution_time"),
                rows_affected=_int((r.get("adapter_response") or {}).get("rows_affected")),
                failures=_int(r.get("failures")),
                started_at=started,
                finished_at=finished,
                round=round_,
                compiled_code=_message(r.get("compiled_code") or None, COMPILED_LIMIT),
                thread=r.get("thread_id") or None,
                freshness=_freshness(r),
            )
        )
    return out


def _unreported(
    uid: str, status: str, message: str | None, node: NodeStart | Planned, **more
) -> NodeResult:
    """A node no invocation reported on, with jetdbt's `status` for it and why."""
    return NodeResult(
        unique_id=uid,
        status=status,
        outcome=outcome(status),
        resource_type=node.resource_type,
        name=node.name,
        relation=node.relation,
        message=message,
        **more,
    )


class Overlay:
    """The results of one attempt's invocations, each laid over the ones before."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeResult] = {}
        self.merged: dict | None = None  # run_results.json of every node, its last result
        # What dbt reported live in the invocation going on: it stands when the invocation
        # ends without run_results.json (killed for memory, cancelled, timed out).
        self._started: dict[str, tuple[NodeStart, int]] = {}
        self._finished: dict[str, NodeResult] = {}

    def begin(self) -> None:
        """A new invocation: nothing of it reported yet."""
        self._started, self._finished = {}, {}

    def started(self, start: NodeStart, round_: int) -> None:
        self._started[start.unique_id] = (start, round_)

    def finished(self, node: NodeResult) -> None:
        self._finished[node.unique_id] = node

    def close(self, status: str, message: str | None) -> None:
        """The invocation ended without run_results.json: the nodes dbt finished stand as it
        reported them, and one it started but never finished ends with `status`."""
        self.nodes.update(self._finished)
        for uid, (start, round_) in self._started.items():
            if uid not in self._finished:
                self.nodes[uid] = _unreported(
                    uid, status, message, start, started_at=start.started_at, round=round_
                )
        self.begin()

    def not_reached(self, planned: dict[str, Planned], message: str) -> None:
        """Each node the run would have run and no invocation reported on: `not run`,
        saying why in `message`."""
        for uid, node in planned.items():
            if uid not in self.nodes:
                self.nodes[uid] = _unreported(uid, NODE_NOT_RUN, message, node)

    def add(self, run_results: dict, manifest: dict | None, round_: int) -> None:
        self.begin()  # the invocation's own record replaces what it reported live
        for node in from_artifacts(run_results, manifest, round_):
            self.nodes[node.unique_id] = node
        if self.merged is None:
            self.merged = run_results
        else:
            redone = {r.get("unique_id"): r for r in run_results.get("results", [])}
            kept = [r for r in self.merged["results"] if r.get("unique_id") not in redone]
            self.merged["results"] = kept + list(redone.values())

    def in_order(self) -> list[NodeResult]:
        """Every node, in the order they started (those that never started last)."""
        return sorted(
            self.nodes.values(), key=lambda n: (n.started_at is None, n.started_at, n.unique_id)
        )


def show_rows(record: dict) -> list[dict] | None:
    """The rows of a ShowNode record (`dbt show --output json`), cut to PREVIEW_BYTES; None
    for any other record."""
    if record.get("info", {}).get("name") != SHOW_NODE:
        return None
    try:
        shown = msgspec.json.decode(record.get("data", {}).get("preview") or "[]")
    except msgspec.DecodeError:
        return []
    rows = shown.get("show", []) if isinstance(shown, dict) else shown
    kept, size = [], 2
    for row in rows if isinstance(rows, list) else []:
        size += len(msgspec.json.encode(row)) + 1
        if size > PREVIEW_BYTES or not isinstance(row, dict):
            break
        kept.append(row)
    return kept


_NAMED = ("unique_id", "status")  # what a sources.json entry must say, as text


def freshness_as_results(sources) -> dict:
    """sources.json (what `dbt source freshness` writes in place of run_results.json) in
    run_results.json's shape, each source's message saying how old its data is against
    its own thresholds. An entry that is not an object, or whose id or status is not text,
    is left out: what a malformed file says never fails the run's result."""
    entries = sources.get("results") if isinstance(sources, dict) else None
    out = []
    for r in entries if isinstance(entries, list) else []:
        if not (isinstance(r, dict) and all(isinstance(r.get(k), str) for k in _NAMED)):
            continue
        message = r.get("error")
        fresh = _freshness(r)
        if message is None and fresh is not None and _text(r.get("max_loaded_at")):
            limits = [
                f"{kind} after {t.count} {t.period}"
                for kind, t in (("warn", fresh.warn_after), ("error", fresh.error_after))
                if t is not None
            ]
            message = f"max_loaded_at {r['max_loaded_at']}" + (
                f", {age(fresh.age_seconds)} ago" if fresh.age_seconds is not None else ""
            )
            message += f" ({'; '.join(limits)})" if limits else ""
        out.append({**r, "message": message})
    return {**sources, "results": out} if isinstance(sources, dict) else {"results": out}

"""A run's whole history, read from the log itself (never from a projection).

Its events are the messages on `dbt.evt.*.<project>.<run_id>.>`, read in stream
order from the first one; the command that asked for the run is read from
DBT_COMMANDS at the sequence RunRequested recorded (a malformed command has no
RunRequested: the runner names its refusal `c<sequence>`), cancels from the
project's cancel subject, and the state the run published from the project's
state subjects. Every message is kept verbatim beside the summary drawn from it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import msgspec
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.bus.stream_batches import Slice
from jetdbt.shared.bus.streams import COMMANDS, EVENTS
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.outcomes import precedence
from nats.js.errors import NotFoundError

__all__ = ["Entry", "Attempt", "NodeOutcome", "RunHistory", "run_history", "render"]

_REFUSED_COMMAND = re.compile(r"c(\d+)\Z")


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One message as stored: `payload` when it is JSON, else `text`."""

    stream: str
    seq: int
    time: datetime
    subject: str
    type: str | None
    payload: Any = None
    text: str | None = None


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    attempt: int
    runner: str = ""
    version: str = ""
    started_at: datetime | None = None
    ended: str = "running"  # finished, lost or running
    ended_at: datetime | None = None
    status: str | None = None
    exit_code: int | None = None


class NodeOutcome(msgspec.Struct, frozen=True, kw_only=True):
    unique_id: str
    attempt: int
    round: int
    status: str
    outcome: str
    message: str | None = None


class RunHistory(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    project: str
    status: str
    requested_by: str | None
    team: str | None = None  # the principal's team and the door its command came in by
    door: str | None = None
    requested_at: datetime | None
    command: Entry | None  # the command as submitted, from DBT_COMMANDS
    arguments: dict[str, Any] | None  # the command block RunRequested recorded
    refused_reason: str | None
    attempts: list[Attempt]
    nodes: list[NodeOutcome]  # each node's final outcome
    retries: list[NodeOutcome]  # outcomes a later attempt or retry round superseded
    deferred_to: str | None
    published_state: list[Entry]
    entries: list[Entry]  # everything above, in stream order (the command first)


def _entry(stream: str, seq: int, time: datetime, subject: str, data: bytes) -> Entry:
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return Entry(
            stream=stream,
            seq=seq,
            time=time,
            subject=subject,
            type=None,
            text=data.decode(errors="replace"),
        )
    kind = payload.get("type") if isinstance(payload, dict) else None
    return Entry(stream=stream, seq=seq, time=time, subject=subject, type=kind, payload=payload)


async def _read(js, stream: str, pattern: str, after: int) -> list[tuple[Entry, bytes]]:
    out = []
    async with Slice(js, stream, pattern, after=after) as batches:
        async for pairs in batches:
            for seq, m in pairs:
                out.append((_entry(stream, seq, m.metadata.timestamp, m.subject, m.data), m.data))
    return out


async def _command(js, seq: int) -> Entry | None:
    try:
        msg = await js.get_msg(COMMANDS, seq)
    except NotFoundError:
        return None  # aged out of DBT_COMMANDS (kept for a year)
    return _entry(COMMANDS, msg.seq, msg.time, msg.subject, msg.data or b"")


def _typed(data: bytes, subject: str) -> ev.Event | None:
    """The event a message holds, when it is a fact of the subject it is on (its family and
    keys are the subject's); else None: shown verbatim, never summarised as a fact."""
    try:
        event = ev.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return event if ev.fits(event, subject) else None


async def run_history(bus: Bus, run_id: str, project: str | None = None) -> RunHistory:
    js = bus.js
    pattern = subjects.run_pattern(project, run_id)
    where = f" in project {project!r}" if project else ""
    try:
        first = await js.get_msg(EVENTS, seq=1, next=True, subject=pattern)
    except NotFoundError:
        raise ValueError(f"no events for run {run_id!r}{where}") from None
    found = await _read(js, EVENTS, pattern, first.seq - 1)
    projects = {subjects.subject_key(entry.subject) for entry, _ in found}
    if len(projects) > 1:
        names = ", ".join(sorted(projects))
        raise ValueError(f"run id {run_id!r} is used by projects {names}; name one with --project")
    project = projects.pop()
    typed = [(entry, _typed(data, entry.subject)) for entry, data in found]
    states = [
        entry
        for entry, data in await _read(js, EVENTS, subjects.state_pattern(project), first.seq - 1)
        if isinstance(e := _typed(data, entry.subject), ev.StatePublished) and e.run_id == run_id
    ]

    requested = next((e for _, e in typed if isinstance(e, ev.RunRequested)), None)
    command_seq = requested.command_seq if requested else 0
    if requested is None and (m := _REFUSED_COMMAND.match(run_id)):
        command_seq = int(m.group(1))
    command = await _command(js, command_seq) if command_seq else None
    cancels = []
    if command is not None:
        cancels = [
            entry
            for entry, _ in await _read(
                js, COMMANDS, subjects.command_pattern("cancel", project), command.seq
            )
            if isinstance(entry.payload, dict) and entry.payload.get("run_id") == run_id
        ]

    summary = _summarise([await event_blobs.resolved(bus, e) for _, e in typed if e is not None])
    entries = sorted([entry for entry, _ in found] + states, key=lambda x: x.seq)
    return RunHistory(
        run_id=run_id,
        project=project,
        requested_by=requested.requested_by if requested else _submitted_by(command),
        team=(requested.team or None) if requested else None,
        door=(requested.door or None) if requested else None,
        requested_at=(requested.requested_at or requested.at) if requested else None,
        command=command,
        arguments=requested.command if requested else None,
        published_state=states,
        entries=([command] if command else []) + cancels + entries,
        **summary,
    )


def _submitted_by(command: Entry | None) -> str | None:
    """Who published a command no runner recorded: the principal its subject names (never
    what its payload claims)."""
    if command is None:
        return None
    try:
        return subjects.command_principal(command.subject)
    except subjects.InvalidName:
        return None


def _summarise(typed: list[ev.Event]) -> dict[str, Any]:
    """Status, attempts, final node outcomes and superseded ones, from the typed events."""
    attempts: dict[int, Attempt] = {}
    finished: dict[str, list[NodeOutcome]] = {}
    status, refused, deferred = run_status.REQUESTED, None, None
    for e in typed:
        if isinstance(e, ev.RunStarted):
            attempts[e.attempt] = Attempt(
                attempt=e.attempt, runner=e.runner, version=e.version, started_at=e.at
            )
            status = run_status.RUNNING
        elif isinstance(e, ev.RunAttemptLost):
            lost = attempts.get(e.attempt) or Attempt(attempt=e.attempt)
            attempts[e.attempt] = msgspec.structs.replace(lost, ended="lost", ended_at=e.at)
        elif isinstance(e, ev.RunRefused):
            status, refused = run_status.REFUSED, e.reason
        elif isinstance(e, ev.NodeFinished):
            _add(finished, e.attempt, e.node)
        elif isinstance(e, ev.RunFinished):
            r = e.result
            done = attempts.get(e.attempt) or Attempt(attempt=e.attempt)
            attempts[e.attempt] = msgspec.structs.replace(
                done, ended="finished", ended_at=e.at, status=r.status, exit_code=r.exit_code
            )
            for node in r.nodes:
                _add(finished, e.attempt, node)
            status, deferred = r.status, r.deferred_to
    nodes, retries = [], []
    for outcomes in finished.values():
        outcomes.sort(key=_rank)
        nodes.append(outcomes[-1])
        retries += outcomes[:-1]
    return {
        "status": status,
        "refused_reason": refused,
        "attempts": sorted(attempts.values(), key=lambda a: a.attempt),
        "nodes": sorted(nodes, key=lambda n: n.unique_id),
        "retries": sorted(retries, key=lambda n: (n.unique_id, _rank(n))),
        "deferred_to": deferred,
    }


def _rank(n: NodeOutcome) -> tuple[int, int]:
    return precedence(n.attempt, n.round)


def _add(finished: dict[str, list[NodeOutcome]], attempt_number: int, node: ev.NodeResult) -> None:
    """One outcome per (attempt, round): RunFinished repeats what NodeFinished said live."""
    outcome = NodeOutcome(
        unique_id=node.unique_id,
        attempt=attempt_number,
        round=node.round,
        status=node.status,
        outcome=node.outcome,
        message=node.message,
    )
    seen = finished.setdefault(node.unique_id, [])
    seen[:] = [n for n in seen if (n.attempt, n.round) != (attempt_number, node.round)] + [outcome]


def _json(value) -> str:
    return msgspec.json.encode(value).decode()


def render(h: RunHistory) -> str:
    """The history for a person: summary first, then every message in order."""
    lines = [f"run {h.run_id} of {h.project}: {h.status}"]
    if h.refused_reason:
        lines.append(f"refused: {h.refused_reason}")
    lines.append(
        f"requested by {h.requested_by or '?'} (team {h.team or '?'}, door {h.door or '?'})"
        f" at {h.requested_at or '?'}"
    )
    if h.command is not None:
        c = h.command
        lines.append(f"command {c.stream} #{c.seq} at {c.time} on {c.subject}")
        lines.append("  as submitted: " + (h.command.text or _json(h.command.payload)))
    if h.arguments is not None:
        lines.append("  arguments: " + _json(h.arguments))
    lines.append(f"deferred to: {h.deferred_to or '-'}")
    for state in h.published_state:
        p = state.payload
        lines.append(
            f"published state #{state.seq}: {_json(p.get('environment'))}"
            f" manifest {p.get('manifest_digest')}"
        )
    if not h.published_state:
        lines.append("published state: -")
    lines.append(f"attempts: {len(h.attempts)}")
    for a in h.attempts:
        tail = f" {a.status} (exit {a.exit_code})" if a.ended == "finished" else ""
        lines.append(
            f"  #{a.attempt} {a.runner or '?'} version {a.version[:19] or '?'}"
            f" started {a.started_at} {a.ended} {a.ended_at or ''}{tail}".rstrip()
        )
    counts: dict[str, int] = {}
    for n in h.nodes:
        counts[n.outcome] = counts.get(n.outcome, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    lines.append(f"nodes: {len(h.nodes)}" + (f" ({summary})" if summary else ""))
    for n in h.nodes:
        lines.append(f"  {n.outcome:<8} {n.status:<8} {n.unique_id}")
    lines.append(f"retries: {len(h.retries)} superseded outcomes")
    for n in h.retries:
        lines.append(f"  attempt {n.attempt} round {n.round}: {n.outcome} {n.unique_id}")
    lines.append("history:")
    for e in h.entries:
        lines.append(f"  {e.stream} #{e.seq} {e.time} {e.type or e.subject}")
    return "\n".join(lines)

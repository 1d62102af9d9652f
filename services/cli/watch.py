"""Following a run in a terminal: what its events say so far, and the plain output.

`Tally` folds a run's events into what a display shows (counts by outcome, the nodes
running now, why it waits). `Progress` prints plain lines, one per started run and
finished node: the output for a pipe, a CI log or `NO_COLOR`, which scripts read, so its
lines do not change. The live display for a terminal (services/cli/display.py) reads the
same Tally; `styled` decides which one a stream gets.
"""

from __future__ import annotations

import os
import re
import sys
import time

from jetdbt.services.cli.plural import counted
from jetdbt.shared.bus import events as ev
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.outcomes import attention

__all__ = [
    "Tally",
    "Progress",
    "result_table",
    "styled",
    "MARK",
    "seconds",
    "sorted_nodes",
    "started_line",
    "lost_line",
    "queued_line",
    "totals_line",
    "no_nodes_note",
    "cancelled_by",
    "error_lines",
    "message_lines",
    "preview_lines",
    "printable",
]

# The word each outcome is shown by, in every display.
MARK = {"passed": "ok", "failed": "FAIL", "warned": "WARN", "skipped": "skip", "no_op": "no-op"}


# C0 and C1 control characters but tab and newline: the start of every escape sequence.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """What a run reports (a node's name, dbt's message), safe to print: a control character
    is shown as its code, so a name cannot move the cursor, clear the screen or set a link."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def styled(stream) -> bool:
    """Colours and a live area only for a terminal, and never under NO_COLOR (any value,
    as no-color.org asks) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Tally:
    """What a run's events say so far. A node retried in a later round counts once, with
    its latest outcome."""

    def __init__(self, total: int | None = None):
        self.total = total
        self.began = time.monotonic()
        self.running: dict[str, ev.NodeStarted] = {}
        self.outcomes: dict[str, str] = {}
        self.queued: ev.RunQueued | None = None
        self.attempt = 0
        self.heard = False  # an event of the run came back: its command reached the bus
        self.ended = False  # its final event came back

    @property
    def finished(self) -> int:
        return len(self.outcomes)

    @property
    def known_total(self) -> int:
        """The nodes the run is known to report on: the planned count, and never fewer than
        those finished and running (a selection's count is not planned)."""
        return max(self.total or 0, self.finished + len(self.running))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for outcome in self.outcomes.values():
            out[outcome] = out.get(outcome, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: attention(kv[0])))

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def apply(self, event: ev.Event) -> None:
        self.heard = True
        self.ended = self.ended or isinstance(event, ev.RUN_ENDS)
        if isinstance(event, ev.RunQueued):
            self.queued = event
        elif isinstance(event, ev.RunStarted):
            self.queued, self.attempt = None, event.attempt
            self.running.clear()  # a lost attempt's nodes are not running any more
        elif isinstance(event, ev.NodeStarted):
            self.running[event.unique_id] = event
        elif isinstance(event, ev.NodeFinished):
            self.running.pop(event.node.unique_id, None)
            self.outcomes[event.node.unique_id] = event.node.outcome


def started_line(event: ev.RunStarted) -> str:
    return f"run {event.run_id} started (attempt {event.attempt}) on {event.runner}"


def lost_line(event: ev.RunAttemptLost) -> str:
    return f"attempt {event.attempt} was lost; running again"


def queued_line(event: ev.RunQueued) -> str:
    return f"run {event.run_id} queued: {event.reason} (position {event.position})"


def seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}s"


class Progress:
    """Plain lines, one per event worth a line; flushed at once so a pipe shows them live."""

    def __init__(self, tally: Tally, out=None):
        self.tally = tally
        self.out = out or sys.stdout

    async def on_event(self, event: ev.Event) -> None:
        self.tally.apply(event)
        if isinstance(event, ev.RunStarted):
            line = started_line(event)
        elif isinstance(event, ev.RunAttemptLost):
            line = lost_line(event)
        elif isinstance(event, ev.RunQueued):
            line = queued_line(event)
        elif isinstance(event, ev.NodeFinished):
            n = event.node
            line = (
                f"  {MARK.get(n.outcome, n.outcome):>5}  {n.resource_type:<9} {n.name:<48}"
                f" {seconds(n.execution_time):>8}"
            )
        else:
            return
        print(printable(line), file=self.out, flush=True)

    def stop(self) -> None:
        """Nothing to take down: plain lines stay as they were printed."""


def sorted_nodes(result: ev.RunResult) -> list[ev.NodeResult]:
    return sorted(result.nodes, key=lambda n: (attention(n.outcome), n.unique_id))


def cancelled_by(status: str, principal: str | None) -> str:
    """What follows a cancelled run's status: who cancelled it."""
    return f" by {principal}" if status == run_status.CANCELLED and principal else ""


def totals_line(result: ev.RunResult) -> str:
    totals = ", ".join(f"{k}={v}" for k, v in result.totals.items() if v) or "no node ran"
    by = cancelled_by(result.status, result.cancelled_by)
    return (
        f"{result.status.upper()}{by}: {totals} ({result.engine} {result.engine_version},"
        f" warehouse {result.warehouse}, target {result.target})"
    )


# What a run that reports no node says instead, by its status: only a passed one matched none.
_NO_NODES = {
    run_status.PASSED: "(the selection matched no nodes: nothing to build)",
    run_status.CANCELLED: "(cancelled before any node ran)",
}
# How many of an error's last lines, or of a node's message's first lines, are shown: dbt's
# reason is a few lines at an error's end, and at a node message's start.
ERROR_LINES = 12
# The widest a line of an error or a message is shown.
LINE_WIDTH = 200
# The line a Python traceback starts with, as a failed Python model's message holds it.
_TRACEBACK = "Traceback (most recent call last):"


def no_nodes_note(status: str, nodes: list) -> str | None:
    """The line shown for an ended run (`status`, one of run_status.RESULTS) with no node,
    or None when it has `nodes`."""
    if nodes:
        return None
    return _NO_NODES.get(status, "(it failed before any node ran: the error says why)")


def error_lines(result: ev.RunResult) -> list[str]:
    """The run's error as shown: `error:` and its last lines, each cut to 200 characters."""
    said = [line for line in (result.error or "").splitlines() if line.strip()][-ERROR_LINES:]
    return [("error: " if i == 0 else "       ") + line[:LINE_WIDTH] for i, line in enumerate(said)]


def message_lines(message: str | None) -> list[str]:
    """A node's message as shown under it: dbt's first lines (its cause follows the
    `Runtime Error in model ...` line), blank ones left out, at most ERROR_LINES of them.
    A Python model's traceback says its cause last: its exception's lines are kept after
    the first ones, the frames between them counted."""
    said = [line.rstrip()[:LINE_WIDTH] for line in (message or "").splitlines() if line.strip()]
    if len(said) <= ERROR_LINES:
        return said
    raised = _raised(said)
    start = len(said) - len(raised)
    shown = raised[: ERROR_LINES // 2]  # its exception's own line first, what follows cut
    tail = _more(len(raised) - len(shown))
    first = said[: min(start, ERROR_LINES - 1 - len(shown) - len(tail))]
    return [*first, *_more(start - len(first)), *shown, *tail]


def _more(count: int) -> list[str]:
    """The line saying `count` lines are left out, or none when none are."""
    return [f"... {counted(count, 'more line')}"] if count else []


def _raised(lines: list[str]) -> list[str]:
    """The lines of the exception the last Python traceback in `lines` ends with: those from
    the first after its frames (indented no deeper than its `Traceback` line) on; [] when
    there is no traceback, or its end was cut."""
    starts = [i for i, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:
        return []
    depth = _indent(lines[starts[-1]])
    after = range(starts[-1] + 1, len(lines))
    return next((lines[i:] for i in after if _indent(lines[i]) <= depth), [])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _cell(value) -> str:
    return "NULL" if value is None else str(value).replace("\n", " ")[:LINE_WIDTH]


def preview_lines(result: ev.RunResult) -> list[str]:
    """A show's rows as a table, its columns as dbt returned them."""
    if not result.preview:
        return []
    head = list(result.preview[0])
    rows = [[_cell(row.get(c)) for c in head] for row in result.preview]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(head)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()
        for cells in (head, *rows)
    ]


def result_table(result: ev.RunResult) -> str:
    """A compact table of every node's outcome, failures first, then the totals. A name is
    never cut: a script reads it whole, and a longer one only pushes its row's end out."""
    lines = [f"{'outcome':<8} {'dbt status':<12} {'type':<9} {'node':<48} {'rows':>6} {'time':>7}"]
    for n in sorted_nodes(result):
        rows_affected = "" if n.rows_affected is None else str(n.rows_affected)
        lines.append(
            f"{n.outcome:<8} {n.status:<12} {n.resource_type:<9} {n.name:<48}"
            f" {rows_affected:>6} {seconds(n.execution_time):>7}"
        )
        if n.outcome in ("failed", "warned"):
            said = message_lines(n.message)
            lines += [f"{'':<8} {'└' if i == 0 else ' '} {line}" for i, line in enumerate(said)]
    note = no_nodes_note(result.status, result.nodes)
    if note:
        lines.append(note)
    lines.append(totals_line(result))
    if result.deferred_to:
        lines.append(f"deferred to the state published by run {result.deferred_to}")
    lines += error_lines(result)
    shown = preview_lines(result)
    if shown:
        lines += ["", *shown]
    return "\n".join(map(printable, lines))

"""The run's live display and result for a terminal, drawn with rich.

Finished nodes scroll above as lines; one live area at the bottom (the bar, counts by
outcome, elapsed time, the nodes running now or why the run waits) is redrawn in place
and fits the terminal's width. Outcomes are coloured as dbt's console colours them.
Only a terminal without NO_COLOR gets this (`jetdbt.services.cli.watch.styled`); everything else
gets the plain lines of jetdbt.services.cli.watch, which scripts read.
"""

from __future__ import annotations

import asyncio
import io

from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.watch import (
    MARK,
    Tally,
    error_lines,
    lost_line,
    message_lines,
    no_nodes_note,
    preview_lines,
    printable,
    queued_line,
    seconds,
    sorted_nodes,
    started_line,
    totals_line,
)
from jetdbt.shared.bus import events as ev
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.viewer_links import viewer_url
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

__all__ = ["LiveProgress", "print_result", "console_for"]

# dbt's console: failures red, warnings yellow, passes green; skipped grey.
STYLE = {
    "passed": "green",
    "failed": "bold red",
    "warned": "yellow",
    "skipped": "bright_black",
    "no_op": "bright_black",
    "unknown": "magenta",
}
STATUS_STYLE = {
    run_status.PASSED: "bold green",
    run_status.FAILED: "bold red",
    run_status.CANCELLED: "yellow",
}
# The widest a node's name is shown on its line, so time and rows stay near it.
NAME_WIDTH = 80
# The redraw rate of the live area between events (the elapsed time moves on).
TICK_SECONDS = 0.25
# What the terminal itself prints where the cursor is when Ctrl-C is pressed.
ECHOED_INTERRUPT = "^C"


def console_for(stream) -> Console:
    return Console(file=stream, highlight=False, soft_wrap=False)


def _elapsed(value: float) -> str:
    minutes, secs = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _rows(value: int | None) -> str:
    return "" if value is None else counted(value, "row")


def node_line(node: ev.NodeResult, width: int) -> Text:
    """One finished node in fixed columns: outcome, type, name (cut to fit), time, rows."""
    # What is left beside the indent (2), the mark (6), the type (10), time (9), rows (12).
    name_width = min(NAME_WIDTH, max(8, width - 2 - 6 - 10 - 9 - 12))
    line = Text("  ")
    line.append(f"{MARK.get(node.outcome, node.outcome):>5} ", STYLE.get(node.outcome, ""))
    line.append(f"{printable(node.resource_type):<9} ")
    name = Text(printable(node.name), overflow="ellipsis")
    name.truncate(name_width, overflow="ellipsis", pad=True)
    line.append_text(name)
    line.append(f" {seconds(node.execution_time):>8}")
    line.append(f" {_rows(node.rows_affected):>11}", "bright_black")
    line.truncate(width, overflow="ellipsis")
    return line


class LiveArea:
    """The bottom of the screen, built afresh from the tally at every redraw."""

    def __init__(self, tally: Tally):
        self.tally = tally

    def __rich_console__(self, console: Console, options):
        width = options.max_width
        tally = self.tally
        bar_width = max(10, min(30, width // 4))
        bar = ProgressBar(
            total=tally.total or None,
            completed=tally.finished,
            width=bar_width,
            pulse=not tally.total,
        )
        counts = Text(" ")
        counts.append(f"{tally.finished}/{tally.known_total} finished", "bold")
        for outcome, count in tally.counts().items():
            counts.append(", ")
            counts.append(f"{count} {outcome}", STYLE.get(outcome, ""))
        counts.append(f", {len(tally.running)} running  {_elapsed(tally.elapsed())}")
        counts.no_wrap, counts.overflow = True, "ellipsis"
        top = Table.grid(padding=0)
        top.add_column(width=bar_width, no_wrap=True)
        top.add_column(no_wrap=True, overflow="ellipsis", max_width=max(1, width - bar_width))
        top.add_row(bar, counts)
        yield top
        # The cursor rests at the end of this last line: a full-width line would make the
        # terminal's echo of Ctrl-C ("^C") wrap, and the area's erase would then miss its
        # top line. Two columns stay free.
        yield self._status(max(1, width - len(ECHOED_INTERRUPT)))

    def _status(self, width: int) -> Text:
        tally = self.tally
        if tally.queued is not None:
            line = Text("queued: ", "yellow")
            line.append(printable(f"{tally.queued.reason} (position {tally.queued.position})"))
        elif tally.running:
            line = Text("running: ", "cyan")
            line.append(printable(", ".join(node.name for node in tally.running.values())))
        elif not tally.heard:
            line = Text("waiting for a runner to take the run", "bright_black")
        else:
            line = Text("")
        line.no_wrap, line.overflow = True, "ellipsis"
        line.truncate(width, overflow="ellipsis")
        return line


class _AboveLive(io.TextIOBase):
    """Where log lines go while the live area is up: printed above it, as any line is. A
    line written past rich straight to the terminal would leave a stale live area behind."""

    def __init__(self, console: Console):
        self.console = console

    def write(self, text: str) -> int:
        if text.strip("\n"):
            self.console.print(Text(printable(text.rstrip("\n")), "bright_black"))
        return len(text)


class LiveProgress:
    """Finished nodes printed above a live area redrawn in place; `stop` takes the area
    down (the result or the interrupt message takes its place)."""

    def __init__(self, tally: Tally, console: Console, log_level: str):
        self.tally = tally
        self.console = console
        self.log_level = log_level
        # No refresh thread: every redraw happens on the event loop, where the tally changes.
        # What is printed meanwhile (sys.stdout, sys.stderr, logs) goes above the area.
        self.live = Live(LiveArea(tally), console=console, auto_refresh=False, transient=True)
        self.live.start()
        jlog.configure(log_level, stream=_AboveLive(console))
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.live.refresh()

    async def on_event(self, event: ev.Event) -> None:
        self.tally.apply(event)
        if isinstance(event, ev.RunStarted):
            self.console.print(Text(printable(started_line(event)), "bright_black"))
        elif isinstance(event, ev.RunAttemptLost):
            self.console.print(Text(lost_line(event), "yellow"))
        elif isinstance(event, ev.RunQueued) and event.n == 0:
            self.console.print(Text(printable(queued_line(event)), "yellow"))
        elif isinstance(event, ev.NodeFinished):
            self.console.print(node_line(event.node, self.console.width))
        self.live.refresh()

    def stop(self) -> None:
        self._ticker.cancel()
        if self.live.is_started:
            self.live.stop()
            jlog.configure(self.log_level)


def result_renderable(result: ev.RunResult, run_id: str, api_url: str, width: int) -> Group:
    """Every node, failures first with their message, the totals, and where to open it. The
    short columns keep their width; the node's name is cut to what is left."""
    nodes = sorted_nodes(result)
    cells = [
        [
            n.outcome,
            printable(n.status),
            printable(n.resource_type),
            "" if n.rows_affected is None else str(n.rows_affected),
            seconds(n.execution_time),
        ]
        for n in nodes
    ]
    heads = ["outcome", "dbt status", "type", "rows", "time"]
    short = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(heads)]
    between = 3 * 5  # a padding space, the divider and a padding space between six columns
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, expand=False)
    table.add_column("outcome", no_wrap=True, min_width=short[0])
    table.add_column("dbt status", no_wrap=True, min_width=short[1])
    table.add_column("type", no_wrap=True, min_width=short[2])
    table.add_column(
        "node", no_wrap=True, overflow="ellipsis", max_width=max(8, width - sum(short) - between)
    )
    table.add_column("rows", justify="right", no_wrap=True, min_width=short[3])
    table.add_column("time", justify="right", no_wrap=True, min_width=short[4])
    for n, (outcome, status, kind, rows, took) in zip(nodes, cells, strict=True):
        style = STYLE.get(n.outcome, "")
        # Text, never a str: a str cell is read as rich markup, and a name may hold "[".
        row = (status, kind, printable(n.name), rows, took)
        table.add_row(Text(outcome, style), *map(Text, row))
        said = message_lines(n.message) if n.outcome in ("failed", "warned") else []
        if said:
            message = Text(printable("└ " + "\n  ".join(said)), style, overflow="fold")
            message.no_wrap = False
            table.add_row("", "", "", message, "", "")
    parts: list = [table] if result.nodes else []
    note = no_nodes_note(result.status, result.nodes)
    if note:
        parts.append(Text(note))
    parts.append(Text(printable(totals_line(result)), STATUS_STYLE.get(result.status, "bold")))
    if result.deferred_to:
        parts.append(Text(f"deferred to the state published by run {result.deferred_to}"))
    parts += [Text(printable(line), "red") for line in error_lines(result)]
    shown = preview_lines(result)
    if shown:
        parts.append(Text(printable("\n".join(["", *shown]))))
    parts.append(Text(f"run id: {run_id}"))
    parts.append(Text(f"viewer: {viewer_url(api_url, run_id)}", "cyan"))
    parts.append(Text(f"api:    {api_url}/v1/runs/{run_id}", "cyan"))
    return Group(*parts)


def print_result(console: Console, result: ev.RunResult, run_id: str, api_url: str) -> None:
    console.print(result_renderable(result, run_id, api_url, console.width))

"""Live per-model progress in a terminal: a bar with counts, one line per finished node."""

from __future__ import annotations

import sys

from shared import events as ev

__all__ = ["Progress", "result_table", "planned_nodes"]

_EXECUTED = {"model", "seed", "snapshot", "test", "unit_test"}


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


_MARK = {"passed": "ok", "failed": "FAIL", "warned": "WARN", "skipped": "skip", "no_op": "no-op"}


def planned_nodes(manifest: dict) -> int:
    """How many nodes an unselected `dbt build` reports on (ephemeral models run inline)."""
    count = 0
    for node in manifest.get("nodes", {}).values():
        if node.get("resource_type") not in _EXECUTED:
            continue
        if (node.get("config") or {}).get("materialized") == "ephemeral":
            continue
        count += 1
    return count + len(manifest.get("unit_tests", {}))


class Progress:
    def __init__(self, total: int | None = None, out=None):
        self.out = out or sys.stdout
        self.total = total
        self.running: set[str] = set()
        self.finished = 0
        self.tty = self.out.isatty()

    def _bar(self) -> str:
        width = 30
        if self.total:
            filled = min(width, width * self.finished // self.total)
            counts = f"{self.finished}/{self.total}"
        else:
            filled, counts = 0, f"{self.finished} finished"
        return f"[{'#' * filled}{'.' * (width - filled)}] {counts} · {len(self.running)} running"

    def _clear(self) -> None:
        if self.tty:
            self.out.write("\r\033[K")

    async def on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            print(
                f"run {event.run_id} started (attempt {event.attempt}) on {event.runner}",
                file=self.out,
            )
        elif isinstance(event, ev.RunAttemptLost):
            print(f"attempt {event.attempt} was lost; running again", file=self.out)
        elif isinstance(event, ev.NodeStarted):
            self.running.add(event.unique_id)
        elif isinstance(event, ev.NodeFinished):
            n = event.node
            self.running.discard(n.unique_id)
            self.finished += 1
            self._clear()
            seconds = f"{n.execution_time:.2f}s" if n.execution_time is not None else ""
            print(
                f"  {_MARK.get(n.outcome, n.outcome):>5}  {n.resource_type:<9} {_short(n.name):<48}"
                f" {seconds:>8}",
                file=self.out,
            )
        else:
            return
        if self.tty:
            self.out.write(self._bar())
        self.out.flush()

    def done(self) -> None:
        if self.tty:
            self._clear()
            self.out.flush()


def result_table(result: ev.RunResult) -> str:
    """A compact table of every node's outcome, failures first, then the totals."""
    order = {"failed": 0, "warned": 1, "skipped": 2, "unknown": 3, "no_op": 4, "passed": 5}
    rows = sorted(result.nodes, key=lambda n: (order.get(n.outcome, 9), n.unique_id))
    lines = [f"{'outcome':<8} {'dbt status':<12} {'type':<9} {'node':<48} {'rows':>6} {'time':>7}"]
    for n in rows:
        rows_affected = "" if n.rows_affected is None else str(n.rows_affected)
        seconds = "" if n.execution_time is None else f"{n.execution_time:.2f}s"
        lines.append(
            f"{n.outcome:<8} {n.status:<12} {n.resource_type:<9} {_short(n.name):<48}"
            f" {rows_affected:>6} {seconds:>7}"
        )
        if n.outcome in ("failed", "warned") and n.message:
            lines.append(f"{'':<8} └ {n.message.splitlines()[0][:100]}")
    if not result.nodes:
        lines.append("(the selection matched no nodes: nothing to build)")
    totals = ", ".join(f"{k}={v}" for k, v in result.totals.items() if v) or "no nodes"
    lines.append(
        f"{result.status.upper()}: {totals} ({result.engine} {result.engine_version},"
        f" warehouse {result.warehouse}, target {result.target})"
    )
    if result.deferred_to:
        lines.append(f"deferred to the state published by run {result.deferred_to}")
    if result.error:
        lines.append("error: " + result.error.splitlines()[-1][:200])
    return "\n".join(lines)

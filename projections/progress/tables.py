"""The progress projection's tables, `runs` and `run_nodes`, one definition of each one's
columns: the migrations make them, the fold writes them and the queries read them
(tests/stack/test_tables.py holds all three to it); and what a stored run result holds."""

from __future__ import annotations

__all__ = [
    "TABLES",
    "RUN_COLUMNS",
    "JSON_COLUMNS",
    "COUNT_COLUMNS",
    "NODE_COLUMNS",
    "NODE_DETAIL_COLUMNS",
    "without_nodes",
]

RUN_COLUMNS = (
    "run_id",
    "project",
    "status",
    "command",
    "requested_by",
    "team",
    "door",
    "requested_at",
    "hidden",
    "attempt",
    "lost_attempts",
    "version",
    "runner",
    "started_at",
    "finished_at",
    "refused_reason",
    "totals",
    "result",
    "log_object",
    "log_lines",
    "log_bytes",
    "files_pruned_at",
    "queue_reason",
    "queue_position",
    "queued_at",
    "queued_seconds",
    "artifacts",
    "job",
    "trigger",
    "environment",
    "pr",
)
JSON_COLUMNS = ("command", "totals", "result", "artifacts")
# Counted from the run's run_nodes rows each time the run row is written, never incremented.
COUNT_COLUMNS = ("nodes_started", "nodes_finished")
NODE_COLUMNS = (
    "run_id",
    "unique_id",
    "resource_type",
    "name",
    "relation",
    "status",
    "outcome",
    "message",
    "started_at",
    "finished_at",
    "execution_time",
    "rows_affected",
    "failures",
    "round",
    "attempt",
    "thread",
    "compiled_code",
)
# What a run's listing of its nodes leaves out: the compiled SQL is read one node at a time.
NODE_DETAIL_COLUMNS = ("compiled_code",)


TABLES: dict[str, tuple[str, ...]] = {
    "runs": RUN_COLUMNS + COUNT_COLUMNS,
    "run_nodes": NODE_COLUMNS,
}


def without_nodes(result: dict) -> dict:
    """A run's result as stored: its nodes are the run's `run_nodes` rows, so the row
    stays small however many nodes the run had (the log keeps the whole result)."""
    return {k: v for k, v in result.items() if k != "nodes"}

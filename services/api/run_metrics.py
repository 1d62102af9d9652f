"""Runs in `/metrics`: runs finished by project and outcome, and histograms of run and node
durations, to alert on (a project's failures rising, its builds getting slower). Counted
from the progress projection on each scrape, like every answer of the API: its rows are
never deleted (retention removes a run's files, not its record), so each series only grows,
as a Prometheus counter and histogram must."""

from __future__ import annotations

__all__ = [
    "run_metrics",
    "RUN_BUCKETS",
    "NODE_BUCKETS",
    "histogram",
    "histogram_sql",
    "label",
]

# Upper bounds in seconds; +Inf is added.
RUN_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
NODE_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800)

_FINISHED = (
    "SELECT project, status, count(*) AS n FROM runs WHERE finished_at IS NOT NULL"
    " GROUP BY project, status ORDER BY project, status"
)


def histogram_sql(value: str, table: str, where: str, buckets: tuple[float, ...]) -> str:
    """One row: the count at or below each bound, the count and the sum of `value`."""
    below = ", ".join(
        f"count(*) FILTER (WHERE {value} <= {bound}) AS le{i}" for i, bound in enumerate(buckets)
    )
    return (
        f"SELECT {below}, count(*) AS count, coalesce(sum({value}), 0) AS sum"
        f" FROM {table} WHERE {where}"
    )


_RUN_SECONDS = "extract(epoch FROM finished_at - started_at)"
_RUNS = histogram_sql(
    _RUN_SECONDS, "runs", "finished_at IS NOT NULL AND started_at IS NOT NULL", RUN_BUCKETS
)
_NODES = histogram_sql("execution_time", "run_nodes", "execution_time IS NOT NULL", NODE_BUCKETS)


def label(value: str) -> str:
    """A label value as the text format escapes it (project, team, principal: anyone's text)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def histogram(metric: str, help_text: str, row, buckets: tuple[float, ...]) -> list[str]:
    """A histogram's lines from a row `histogram_sql` read."""
    lines = [f"# HELP {metric} {help_text}", f"# TYPE {metric} histogram"]
    lines += [f'{metric}_bucket{{le="{b:g}"}} {row[f"le{i}"]}' for i, b in enumerate(buckets)]
    lines += [
        f'{metric}_bucket{{le="+Inf"}} {row["count"]}',
        f"{metric}_sum {float(row['sum']):g}",
        f"{metric}_count {row['count']}",
    ]
    return lines


async def run_metrics(conn) -> str:
    """The runs' lines of the Prometheus text format."""
    metric = "jetdbt_runs_finished_total"
    lines = [
        f"# HELP {metric} Runs that ended, by project and outcome.",
        f"# TYPE {metric} counter",
    ]
    for r in await conn.fetch(_FINISHED):
        lines.append(
            f'{metric}{{project="{label(r["project"])}",outcome="{label(r["status"])}"}} {r["n"]}'
        )
    lines += histogram(
        "jetdbt_run_duration_seconds",
        "How long runs that ended took, from start to end.",
        await conn.fetchrow(_RUNS),
        RUN_BUCKETS,
    )
    lines += histogram(
        "jetdbt_node_duration_seconds",
        "How long dbt took for each node it ran (its execution_time).",
        await conn.fetchrow(_NODES),
        NODE_BUCKETS,
    )
    return "\n".join(lines) + "\n"

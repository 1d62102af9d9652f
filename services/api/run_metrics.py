"""Runs in `/metrics`: runs finished by project and outcome, and histograms of run and node
durations, to alert on (a project's failures rising, its builds getting slower). Counted
from the progress projection on each scrape, like every answer of the API: its rows are
never deleted (retention removes a run's files, not its record), so each series only grows,
as a Prometheus counter and histogram must."""

from __future__ import annotations

from jetdbt.projections.answers import Database
from jetdbt.projections.progress import queries

__all__ = [
    "run_metrics",
    "RUN_BUCKETS",
    "NODE_BUCKETS",
    "histogram",
    "label",
]

# Upper bounds in seconds; +Inf is added.
RUN_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
NODE_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800)


def label(value: str) -> str:
    """A label value as the text format escapes it (project, team, principal: anyone's text)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def histogram(
    metric: str, help_text: str, found: queries.Histogram, buckets: tuple[float, ...]
) -> list[str]:
    """A histogram's lines from what a query counted below each of `buckets`."""
    lines = [f"# HELP {metric} {help_text}", f"# TYPE {metric} histogram"]
    lines += [
        f'{metric}_bucket{{le="{b:g}"}} {n}' for b, n in zip(buckets, found.below, strict=True)
    ]
    lines += [
        f'{metric}_bucket{{le="+Inf"}} {found.count}',
        f"{metric}_sum {found.sum:g}",
        f"{metric}_count {found.count}",
    ]
    return lines


async def run_metrics(db: Database) -> str:
    """The runs' lines of the Prometheus text format."""
    metric = "jetdbt_runs_finished_total"
    lines = [
        f"# HELP {metric} Runs that ended, by project and outcome.",
        f"# TYPE {metric} counter",
    ]
    for r in await queries.finished_runs(db):
        lines.append(
            f'{metric}{{project="{label(r.project)}",outcome="{label(r.status)}"}} {r.runs}'
        )
    lines += histogram(
        "jetdbt_run_duration_seconds",
        "How long runs that ended took, from start to end.",
        await queries.run_durations(db, RUN_BUCKETS),
        RUN_BUCKETS,
    )
    lines += histogram(
        "jetdbt_node_duration_seconds",
        "How long dbt took for each node it ran (its execution_time).",
        await queries.node_durations(db, NODE_BUCKETS),
        NODE_BUCKETS,
    )
    return "\n".join(lines) + "\n"

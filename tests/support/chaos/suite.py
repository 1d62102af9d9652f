"""The experiments in order, their counts and time budgets, and the one table they fill."""

from __future__ import annotations

import asyncio
import functools
import math
from pathlib import Path

from jetdbt.services.stack.embedded import start_postgres

from tests.support.chaos.concurrency import concurrent_runs
from tests.support.chaos.harness import ORPHAN_RESOLUTION, Tally, timed
from tests.support.chaos.outages import leader_kills, nats_restarts, postgres_restarts
from tests.support.chaos.projectors import projector_kills
from tests.support.chaos.runners import runner_kills

__all__ = ["FULL", "QUICK", "run_suite", "render"]

# experiment: how many times, in `make chaos` and in the suite's quick version
FULL = {"runner": 20, "nats": 5, "leader": 3, "postgres": 3, "projector": 10, "concurrent": 6}
QUICK = {"runner": 1, "nats": 1, "leader": 1, "postgres": 1, "projector": 1, "concurrent": 2}
SETUP_SECONDS = 90.0  # servers, stack, deploy and the closing replay
EACH_SECONDS = 60.0  # one broken build, judged

_TITLES = {
    "runner": "runner SIGKILL mid-build",
    "nats": "NATS restart mid-run",
    "leader": "cluster stream leader killed",
    "postgres": "Postgres restart mid-fold",
    "projector": "projector SIGKILL mid-batch",
    "concurrent": "concurrent runs of one project",
}

_COLUMNS = (
    ("experiment", "experiment", 34),
    ("started", "started", 8),
    ("passed", "passed", 7),
    ("failed_wrongly", "failed wrongly", 15),
    ("stuck", "stuck", 6),
    ("nodes_missing", "nodes missing", 14),
    ("nodes_duplicated", "nodes duplicated", 17),
    ("overlaps", "overlaps", 9),
    ("orphan_seconds", "orphan dbt s", 13),
    ("replay_differences", "replay differences", 19),
    ("seconds", "seconds", 8),
)


async def run_suite(root: Path, quick: bool = False, only: set[str] | None = None) -> list[Tally]:
    """Every experiment (or those in `only`), one after another, each on fresh servers and a
    fresh schema in one Postgres of the suite's own (one experiment restarts it)."""
    counts = QUICK if quick else FULL
    server, pg_url = await asyncio.to_thread(start_postgres, root / "pg" / "data")
    experiments = {
        "runner": runner_kills,
        "nats": nats_restarts,
        "leader": leader_kills,
        "postgres": functools.partial(postgres_restarts, pg_server=server),
        "projector": projector_kills,
        "concurrent": concurrent_runs,
    }
    tallies = []
    try:
        for key, experiment in experiments.items():
            if only and key not in only:
                continue
            n = counts[key]
            tally = Tally(f"{_TITLES[key]} x{n}", key=key)
            run = functools.partial(experiment, root=root, pg_url=pg_url, count=n)
            tallies.append(await timed(tally, run, SETUP_SECONDS + EACH_SECONDS * n))
    finally:
        await asyncio.to_thread(server.cleanup)
    return tallies


def render(tallies: list[Tally]) -> str:
    """One row an experiment, then what each one noted."""

    def cell(t: Tally, attr: str, width: int) -> str:
        value = getattr(t, attr)
        if attr == "experiment":
            return value.ljust(width)
        if attr == "orphan_seconds":  # told to its resolution, never rounded up
            value = math.floor(value / ORPHAN_RESOLUTION) * ORPHAN_RESOLUTION
            return f"{value:.1f}".rjust(width)
        return (f"{value:.0f}" if isinstance(value, float) else str(value)).rjust(width)

    titles = [title.rjust(w) if i else title.ljust(w) for i, (_, title, w) in enumerate(_COLUMNS)]
    lines = ["".join(titles)]
    lines += ["".join(cell(t, attr, w) for attr, _, w in _COLUMNS) for t in tallies]
    for t in tallies:
        notes = list(t.notes)
        if t.orphan_seconds:
            notes.append(f"the longest a dbt outlived its killed runner: {t.orphan_seconds:.3f}s")
        lines += [f"  {t.experiment}: {note}" for note in notes]
    return "\n".join(lines)

"""Every fold by projection name, built from the bus (a fold may read blobs);
streams.yaml says which subjects each one reads. tests/test_fold_contract.py runs
one behaviour suite over every fold listed here."""

from __future__ import annotations

from collections.abc import Callable

from projections.catalog import CatalogFold
from projections.deploys import DeploysFold
from projections.environments import EnvironmentsFold
from projections.freshness import FreshnessFold
from projections.graph import GraphFold
from projections.hooks import HooksFold
from projections.jobs import JobsFold
from projections.loop import Fold
from projections.progress import ProgressFold
from projections.retry_state import RetryFold
from shared.bus import Bus

__all__ = ["FOLDS", "TABLES"]

FOLDS: dict[str, Callable[[Bus], Fold]] = {
    "progress": ProgressFold,
    "deploys": DeploysFold,
    "graph": GraphFold,
    "retry": lambda bus: RetryFold(),
    "environments": lambda bus: EnvironmentsFold(),
    "jobs": lambda bus: JobsFold(),
    "hooks": lambda bus: HooksFold(),
    "freshness": FreshnessFold,
    "catalog": CatalogFold,
}

# The tables each projection writes, for `jetdbt replay --projection NAME`: a
# replay compares exactly these with the live ones. tests/test_replay.py checks
# that every table the migrations create has one owner here.
TABLES = {
    "progress": ("runs", "run_nodes"),
    "deploys": ("deploys",),
    "graph": (
        "graph_versions",
        "graph_nodes",
        "graph_edges",
        "graph_column_edges",
        "relation_writes",
    ),
    "retry": ("retry_state",),
    "environments": ("environments",),
    "jobs": ("jobs", "job_schedules"),
    "hooks": ("hooks", "hook_deliveries"),
    "freshness": ("source_freshness",),
    "catalog": ("node_catalog",),
}

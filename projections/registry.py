"""Every fold by projection name, built from the bus (a fold may read blobs);
streams.yaml says which subjects each one reads. tests/stack/test_fold_contract.py runs
one behaviour suite over every fold listed here."""

from __future__ import annotations

from collections.abc import Callable

from projections.folds.catalog import CatalogFold
from projections.folds.deploys import DeploysFold
from projections.folds.environment_state import EnvironmentStateFold
from projections.folds.freshness import FreshnessFold
from projections.folds.graph import GraphFold
from projections.folds.hooks import HooksFold
from projections.folds.jobs import JobsFold
from projections.folds.progress import ProgressFold
from projections.folds.promotions import PromotionsFold
from projections.folds.retry_state import RetryStateFold
from projections.loop import Fold
from shared.bus import Bus

__all__ = ["FOLDS", "TABLES"]

FOLDS: dict[str, Callable[[Bus], Fold]] = {
    "progress": ProgressFold,
    "deploys": DeploysFold,
    "graph": GraphFold,
    "retry": lambda bus: RetryStateFold(),
    "environments": lambda bus: EnvironmentStateFold(),
    "jobs": lambda bus: JobsFold(),
    "hooks": lambda bus: HooksFold(),
    "freshness": FreshnessFold,
    "catalog": CatalogFold,
    "promotions": lambda bus: PromotionsFold(),
}

# The tables each projection writes, for `jetdbt replay --projection NAME`: a
# replay compares exactly these with the live ones. tests/with_dbt/test_replay.py checks
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
    "promotions": ("environment_versions", "promotions"),
}

"""Every fold by projection name, built from the bus (a fold may read blobs);
streams.yaml says which subjects each one reads. tests/stack/test_fold_contract.py runs
one behaviour suite over every fold listed here."""

from __future__ import annotations

from collections.abc import Callable

from jetdbt.projections.catalog.fold import CatalogFold
from jetdbt.projections.deploys.fold import DeploysFold
from jetdbt.projections.environments.fold import EnvironmentStateFold
from jetdbt.projections.freshness.fold import FreshnessFold
from jetdbt.projections.graph.fold import GraphFold
from jetdbt.projections.hooks.fold import HooksFold
from jetdbt.projections.jobs.fold import JobsFold
from jetdbt.projections.loop import Fold
from jetdbt.projections.progress.fold import ProgressFold
from jetdbt.projections.promotions.fold import PromotionsFold
from jetdbt.projections.retry.fold import RetryStateFold
from jetdbt.shared.bus.connection import Bus

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

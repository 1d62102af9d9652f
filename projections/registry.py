"""Every fold by projection name, built from the bus (a fold may read blobs);
streams.yaml says which subjects each one reads. tests/stack/test_fold_contract.py runs
one behaviour suite over every fold listed here."""

from __future__ import annotations

from collections.abc import Callable

from jetdbt.projections.catalog import tables as catalog_tables
from jetdbt.projections.catalog.fold import CatalogFold
from jetdbt.projections.deploys import tables as deploys_tables
from jetdbt.projections.deploys.fold import DeploysFold
from jetdbt.projections.environments import tables as environments_tables
from jetdbt.projections.environments.fold import EnvironmentStateFold
from jetdbt.projections.freshness import tables as freshness_tables
from jetdbt.projections.freshness.fold import FreshnessFold
from jetdbt.projections.graph import tables as graph_tables
from jetdbt.projections.graph.fold import GraphFold
from jetdbt.projections.hooks import tables as hooks_tables
from jetdbt.projections.hooks.fold import HooksFold
from jetdbt.projections.jobs import tables as jobs_tables
from jetdbt.projections.jobs.fold import JobsFold
from jetdbt.projections.loop import Fold
from jetdbt.projections.progress import tables as progress_tables
from jetdbt.projections.progress.fold import ProgressFold
from jetdbt.projections.promotions import tables as promotions_tables
from jetdbt.projections.promotions.fold import PromotionsFold
from jetdbt.projections.retry import tables as retry_tables
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

# The tables each projection writes, for `jetdbt replay --projection NAME`: a replay
# compares exactly these with the live ones. Each projection's tables.py declares them.
TABLES: dict[str, tuple[str, ...]] = {
    name: tuple(tables.TABLES)
    for name, tables in {
        "progress": progress_tables,
        "deploys": deploys_tables,
        "graph": graph_tables,
        "retry": retry_tables,
        "environments": environments_tables,
        "jobs": jobs_tables,
        "hooks": hooks_tables,
        "freshness": freshness_tables,
        "catalog": catalog_tables,
        "promotions": promotions_tables,
    }.items()
}

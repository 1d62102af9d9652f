"""Every fold by projection name; streams.yaml says which subjects each one reads."""

from __future__ import annotations

from projections.deploys import DeploysFold
from projections.progress import ProgressFold

__all__ = ["FOLDS"]

FOLDS = {
    "progress": ProgressFold,
    "deploys": DeploysFold,
}

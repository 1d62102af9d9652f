"""How a pull request's deploy and run ended, as `jetdbt ci` reads them through either door
(NATS: services/cli/ci_commands.py, the API: services/cli/ci_api.py)."""

from __future__ import annotations

import msgspec
from jetdbt.shared.bus.commands import CLOSE_PR_LINE
from jetdbt.shared.runs import run_status

__all__ = ["DeployEnd", "FailedNode", "RunEnd", "dropped_relations"]


class FailedNode(msgspec.Struct, frozen=True, kw_only=True):
    unique_id: str
    message: str | None = None


class DeployEnd(msgspec.Struct, frozen=True, kw_only=True):
    """How the PR's deploy ended, whichever door it took: deployed, unchanged, refused, failed."""

    status: str
    version: str = ""
    reason: str = ""

    def went(self) -> bool:
        return self.status not in (run_status.REFUSED, run_status.FAILED)


class RunEnd(msgspec.Struct, frozen=True, kw_only=True):
    """How the PR's run ended, whichever door it took."""

    run_id: str
    status: str  # passed, failed, cancelled, refused
    reason: str | None = None  # the refusal's, or dbt's error
    schema: str | None = None
    deferred_to: str | None = None
    totals: dict[str, int] = {}
    failed: list[FailedNode] = []


def dropped_relations(lines: list[str]) -> list[str]:
    """The relations a close's log lines name as dropped
    (jetdbt.shared.bus.commands.CLOSE_PR_LINE)."""
    return [text.partition(CLOSE_PR_LINE)[2].strip() for text in lines if CLOSE_PR_LINE in text]

"""dbt's artifacts a run keeps as dbt wrote them: what `GET /v1/runs/{run_id}/artifacts/{name}`
serves (tools that read dbt Cloud's artifacts API read these), until retention removes the
run's files with its log."""

from __future__ import annotations

from jetdbt.shared.wording.short_quote import quote

__all__ = ["NAMES", "check_name"]

NAMES = ("manifest.json", "run_results.json")


def check_name(value: str) -> str:
    """An artifact's name, one of NAMES, or ValueError naming them."""
    if value not in NAMES:
        raise ValueError(f"{quote(value)} is no artifact a run keeps; known: {', '.join(NAMES)}")
    return value

"""Where a person opens a run, from the API's address: the links the CLI prints and the
notifier's hooks carry. The viewer is a page of the API's own port (services/api/ui_routes.py
serves it), so a link is a pure function of that address."""

from __future__ import annotations

__all__ = ["viewer_url"]


def viewer_url(api_url: str, run_id: str | None = None) -> str:
    """Where a person opens the viewer: a run's page, or the list of projects."""
    return f"{api_url}/ui/#/runs/{run_id}" if run_id else f"{api_url}/ui/"

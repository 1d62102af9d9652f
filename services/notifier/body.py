"""The JSON a hook receives about one run event: outcome, totals, failed nodes with their
messages (bounded), job and trigger, and links to the viewer and the API."""

from __future__ import annotations

import msgspec
from jetdbt.shared.bus import events as ev
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.viewer_links import viewer_url

__all__ = ["body", "MAX_FAILED_NODES", "MAX_MESSAGE_CHARS"]

MAX_FAILED_NODES = 20
MAX_MESSAGE_CHARS = 1000
_encoder = msgspec.json.Encoder()


def _failed(result: ev.RunResult) -> list[dict]:
    return [
        {
            "unique_id": n.unique_id,
            "status": n.status,
            "message": (n.message or "")[:MAX_MESSAGE_CHARS],
        }
        for n in result.nodes
        if n.outcome == "failed"
    ][:MAX_FAILED_NODES]


def body(
    *,
    delivery_id: str,
    hook: str,
    event_name: str,
    run: ev.RunStarted | ev.RunFinished,
    requested: ev.RunRequested | None,
    base_url: str,
) -> bytes:
    """The exact bytes signed and sent."""
    result = run.result if isinstance(run, ev.RunFinished) else None
    doc = {
        "delivery": delivery_id,
        "hook": hook,
        "event": event_name,
        "run": {
            "id": run.run_id,
            "project": run.project,
            "attempt": run.attempt,
            "outcome": result.status if result else run_status.RUNNING,
            "totals": result.totals if result else {},
            "failed_nodes": _failed(result) if result else [],
            "error": ((result.error or "")[:MAX_MESSAGE_CHARS] or None) if result else None,
            "job": (requested.job if requested else "") or None,
            "trigger": (requested.trigger if requested else "") or None,
            "at": run.at,
        },
        "links": {
            "viewer": viewer_url(base_url, run.run_id),
            "api": f"{base_url}/v1/runs/{run.run_id}",
        },
    }
    return _encoder.encode(doc)

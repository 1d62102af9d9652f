"""Retry state fold: the latest retry state per (project, principal), as the runner will read
it (RetryStateSaved, services/runner/attempts/dbt_retry.py). Its table is `retry_state` and its
route GET /v1/projects/{project}/retry-state; its projection is named `retry` (the name its
checkpoint is stored under).

The runner reads the last message on the retry subject; the stream order decides
which is latest, so a row is only replaced by an event further along the stream.
"""

from __future__ import annotations

from jetdbt.shared.bus import events as ev

__all__ = ["RetryStateFold"]


class RetryStateFold:
    name = "retry"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if not isinstance(event, ev.RetryStateSaved):
            return
        await conn.execute(
            "INSERT INTO retry_state (project, principal, run_id, attempt, version,"
            " run_results_digest, command, args, saved_at, stream_seq)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) ON CONFLICT (project, principal) DO UPDATE"
            " SET run_id = EXCLUDED.run_id, attempt = EXCLUDED.attempt,"
            " version = EXCLUDED.version, run_results_digest = EXCLUDED.run_results_digest,"
            " command = EXCLUDED.command, args = EXCLUDED.args, saved_at = EXCLUDED.saved_at,"
            " stream_seq = EXCLUDED.stream_seq WHERE retry_state.stream_seq < EXCLUDED.stream_seq",
            event.project,
            event.principal or "anonymous",
            event.run_id,
            event.attempt,
            event.version,
            event.run_results_digest,
            event.command,
            event.args,
            event.at,
            seq,
        )

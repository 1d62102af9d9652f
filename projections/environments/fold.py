"""Environment state fold: the state each (project, environment) would hand a deferring run,
from the runner's StatePublished (services/runner/setup/environment_state.py). Its projection
is named `environments`, as is its table and its route (GET /v1/projects/{project}/environments):
names stored in checkpoints and the schema, kept as they are."""

from __future__ import annotations

from jetdbt.shared.bus import events as ev

__all__ = ["EnvironmentStateFold"]


class EnvironmentStateFold:
    name = "environments"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if not isinstance(event, ev.StatePublished):
            return
        env = event.environment
        await conn.execute(
            "INSERT INTO environments (project, environment_key, warehouse, target, schema_name,"
            " database_name, run_id, version, manifest_digest, run_results_digest, published_at,"
            " stream_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)"
            " ON CONFLICT (project, environment_key) DO UPDATE SET run_id = EXCLUDED.run_id,"
            " version = EXCLUDED.version, manifest_digest = EXCLUDED.manifest_digest,"
            " run_results_digest = EXCLUDED.run_results_digest,"
            " published_at = EXCLUDED.published_at, stream_seq = EXCLUDED.stream_seq"
            " WHERE environments.stream_seq < EXCLUDED.stream_seq",
            event.project,
            env.key(),
            env.warehouse,
            env.target,
            env.schema,
            env.database,
            event.run_id,
            event.version,
            event.manifest_digest,
            event.run_results_digest,
            event.at,
            seq,
        )

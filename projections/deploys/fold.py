"""Deploy fold: the deploy family into `deploys`, one row per deploy id, last word wins."""

from __future__ import annotations

import msgspec
from jetdbt.shared.blobs import event_blobs
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.connection import Bus

__all__ = ["DeploysFold"]

_STATUS = {
    ev.DeployRequested: "requested",
    ev.DeployRefused: "refused",
    ev.Deployed: "deployed",
    ev.DeployUnchanged: "unchanged",
    ev.DeployFailed: "failed",
}


class DeploysFold:
    """Reads the blob a version of many files keeps their list in (reading, not publishing)."""

    name = "deploys"

    def __init__(self, bus: Bus | None = None):
        self.bus = bus

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        status = _STATUS.get(type(event))
        if status is None:
            return
        event = await event_blobs.resolved(self.bus, event)
        await conn.execute(
            "INSERT INTO deploys (project, deploy_id, status, version, manifest_digest, engine,"
            " engine_version, adapter, adapter_version, files, skipped, reason, requested_by, at,"
            " team, door, source)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)"
            " ON CONFLICT (project, deploy_id) DO UPDATE SET"
            " status = CASE WHEN EXCLUDED.status = 'requested' THEN deploys.status"
            " ELSE EXCLUDED.status END,"
            " version = COALESCE(EXCLUDED.version, deploys.version),"
            " manifest_digest = COALESCE(EXCLUDED.manifest_digest, deploys.manifest_digest),"
            " engine = COALESCE(EXCLUDED.engine, deploys.engine),"
            " engine_version = COALESCE(EXCLUDED.engine_version, deploys.engine_version),"
            " adapter = COALESCE(EXCLUDED.adapter, deploys.adapter),"
            " adapter_version = COALESCE(EXCLUDED.adapter_version, deploys.adapter_version),"
            " files = COALESCE(EXCLUDED.files, deploys.files),"
            " skipped = COALESCE(EXCLUDED.skipped, deploys.skipped),"
            " reason = COALESCE(EXCLUDED.reason, deploys.reason),"
            " requested_by = COALESCE(NULLIF(EXCLUDED.requested_by, ''), deploys.requested_by),"
            " team = COALESCE(NULLIF(EXCLUDED.team, ''), deploys.team),"
            " door = COALESCE(NULLIF(EXCLUDED.door, ''), deploys.door),"
            " source = COALESCE(EXCLUDED.source, deploys.source),"
            " at = EXCLUDED.at",
            event.project,
            event.deploy_id,
            status,
            getattr(event, "version", None) or getattr(event, "bundle_digest", None),
            getattr(event, "manifest_digest", None),
            getattr(event, "engine", None),
            getattr(event, "engine_version", None),
            getattr(event, "adapter", None),
            getattr(event, "adapter_version", None),
            getattr(event, "files", None),
            msgspec.to_builtins(getattr(event, "skipped", None)),
            getattr(event, "reason", None),
            getattr(event, "requested_by", ""),
            event.at,
            getattr(event, "team", ""),
            getattr(event, "door", ""),
            getattr(event, "source", None) or None,
        )

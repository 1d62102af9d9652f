"""The artifacts of a run's last invocation, byte for byte as dbt wrote them, stored as blobs
when the run ends (masked, like everything a runner stores) and named in its RunLogKept."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetdbt.shared.blobs.artifacts import NAMES
from jetdbt.shared.bus.connection import Bus

if TYPE_CHECKING:
    from jetdbt.services.runner.process.dbt_process import DbtInvocation

__all__ = ["read", "store"]


def read(inv: DbtInvocation) -> dict[str, bytes]:
    """The artifacts `inv` wrote, by name (one it did not write is absent)."""
    written = {}
    for name in NAMES:
        try:
            written[name] = inv.artifact_path(name).read_bytes()
        except OSError:
            continue
    return written


async def store(bus: Bus, written: dict[str, bytes]) -> dict[str, str]:
    """Each artifact as a blob: its name and the blob's digest."""
    return {name: await bus.put_blob(data) for name, data in written.items()}

"""What a replay reports: positions, events, and every table's differences, for a person."""

from __future__ import annotations

import msgspec
from jetdbt.projections.shadow_diff import TableDiff

__all__ = ["ProjectionReplay", "ReplayReport", "render"]


class ProjectionReplay(msgspec.Struct, frozen=True, kw_only=True):
    projection: str
    events: int
    checkpoint: int
    live_checkpoint: int


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    live_schema: str
    shadow_schema: str
    projections: list[ProjectionReplay]
    tables: list[TableDiff]
    events: int
    build_seconds: float
    events_per_second: float
    swapped: bool
    kept: bool

    @property
    def differences(self) -> int:
        return sum(t.differences for t in self.tables)


def _value(row: dict, column: str) -> str:
    return msgspec.json.encode(row[column]).decode()


def render(r: ReplayReport) -> str:
    """The report for a person: positions, row counts, then each difference shown."""
    lines = [
        f"replayed {r.events} events into {r.shadow_schema} ({r.events_per_second:.0f} events/s"
        f" while rebuilding)",
        f"{'projection':<16}{'events':>10}{'checkpoint':>12}{'live':>12}",
    ]
    lines += [
        f"{p.projection:<16}{p.events:>10}{p.checkpoint:>12}{p.live_checkpoint:>12}"
        for p in r.projections
    ]
    lines.append(f"{'table':<24}{'live rows':>12}{'shadow rows':>12}{'differences':>12}")
    lines += [
        f"{t.table:<24}{t.live_rows:>12}{t.shadow_rows:>12}{t.differences:>12}" for t in r.tables
    ]
    for t in r.tables:
        for d in t.shown:
            key = ", ".join(f"{k}={v}" for k, v in d.key.items())
            if d.live is None:
                what = "missing in live"
            elif d.shadow is None:
                what = "missing in the replay"
            else:
                what = "; ".join(
                    f"{c}: live {_value(d.live, c)}, replay {_value(d.shadow, c)}"
                    for c in d.columns
                )
            lines.append(f"  {t.table} {key}: {what}")
        if t.differences > len(t.shown):
            lines.append(f"  {t.table}: {t.differences - len(t.shown)} more not shown")
    lines.append(f"{r.differences} differences")
    if r.swapped:
        lines.append(f"swapped: {r.live_schema} now holds the replayed projections")
    elif r.kept:
        lines.append(f"kept the shadow schema {r.shadow_schema}")
    return "\n".join(lines)

"""How far each projection is behind the log, and how many events it could not apply.

A projection reads a filtered view of DBT_EVENTS, so its lag is counted in the
events on its own subjects after its checkpoint (what an ephemeral consumer
starting there reports pending), not as the gap to the stream's last sequence,
which events of other projections widen.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

__all__ = ["ProjectionLag", "Lags", "lags", "pending", "render"]


class ProjectionLag(msgspec.Struct, frozen=True, kw_only=True):
    projection: str
    checkpoint: int
    checkpoint_at: datetime | None
    stream_last_seq: int
    lag: int
    dead_letters: int
    # Why the projection cannot go past its next batch (a bug in its fold), or None.
    stopped: str | None = None
    stopped_since: datetime | None = None


class Lags(msgspec.Struct, frozen=True, kw_only=True):
    stream: str
    stream_last_seq: int
    projections: list[ProjectionLag]


async def pending(js, subjects: list[str], after: int) -> int:
    """Events on `subjects` stored after sequence `after`."""
    # nats is imported here, not above: `jetdbt status` renders Lags and must start fast.
    from jetdbt.shared.bus.streams import EVENTS
    from nats.js import api

    config = api.ConsumerConfig(
        filter_subjects=subjects,
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=after + 1,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=10,
        mem_storage=True,
    )
    info = await js.add_consumer(EVENTS, config)
    try:
        return info.num_pending
    finally:
        await js.delete_consumer(EVENTS, info.name)


async def lags(conn, js, projections: dict[str, list[str]]) -> Lags:
    """One line per projection in streams.yaml, and per checkpoint or dead letter of another."""
    from jetdbt.shared.bus.stream_batches import last_seq
    from jetdbt.shared.bus.streams import EVENTS

    marks = {
        r["projector"]: r for r in await conn.fetch("SELECT * FROM checkpoints ORDER BY projector")
    }
    dead = {
        r["projector"]: r["n"]
        for r in await conn.fetch(
            "SELECT projector, count(*) AS n FROM dead_letters GROUP BY projector"
        )
    }
    stream_last = await last_seq(js, EVENTS)
    out = []
    for name in sorted(set(projections) | set(marks) | set(dead)):
        mark = marks.get(name)
        done = mark["last_seq"] if mark else 0
        subjects = projections.get(name)
        behind = await pending(js, subjects, done) if subjects else 0
        out.append(
            ProjectionLag(
                projection=name,
                checkpoint=done,
                checkpoint_at=mark["updated_at"] if mark else None,
                stream_last_seq=stream_last,
                lag=behind,
                dead_letters=dead.get(name, 0),
                stopped=mark["stopped"] if mark else None,
                stopped_since=mark["stopped_since"] if mark else None,
            )
        )
    return Lags(stream=EVENTS, stream_last_seq=stream_last, projections=out)


def render(lags: Lags) -> str:
    lines = [
        f"stream {lags.stream} last sequence {lags.stream_last_seq}",
        f"{'projection':<16}{'checkpoint':>12}{'lag':>10}{'dead letters':>14}",
    ]
    lines += [
        f"{p.projection:<16}{p.checkpoint:>12}{p.lag:>10}{p.dead_letters:>14}"
        for p in lags.projections
    ]
    lines += [f"{p.projection} stopped: {p.stopped}" for p in lags.projections if p.stopped]
    return "\n".join(lines)

"""What each principal put on the bus, in `/metrics`: the commands DBT_COMMANDS holds per
principal (a year of them) and the declared writes the intake holds per publisher (a day).
Runners bound how many of them a minute reach the never-purged log
(EXTERNAL_PUBLISHES_PER_MINUTE), so a principal whose count climbs is one to look at.
Read from the streams' per-subject counts, as the server keeps them."""

from __future__ import annotations

from collections import Counter

from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.streams import COMMANDS, INTAKE

__all__ = ["principal_metrics"]

_METRICS = (
    (
        COMMANDS,
        subjects.ALL_COMMANDS,
        "jetdbt_principal_commands",
        "Commands stored, by principal.",
    ),
    (
        INTAKE,
        subjects.ALL_INTAKE,
        "jetdbt_principal_declared_writes",
        "Declared writes in the intake, by publisher.",
    ),
)


def _principal(stream: str, subject: str) -> str | None:
    try:
        if stream == COMMANDS:
            return subjects.command_principal(subject)
        return subjects.intake_publisher(subject)[0]
    except subjects.InvalidName:
        return None


async def principal_metrics(js) -> list[tuple[str, str, Counter[str]]]:
    """(metric, help, count by principal) of each stream."""
    found = []
    for stream, pattern, metric, help_text in _METRICS:
        info = await js.stream_info(stream, subjects_filter=pattern)
        counts: Counter[str] = Counter()
        for subject, count in (info.state.subjects or {}).items():
            principal = _principal(stream, subject)
            if principal is not None:
                counts[principal] += count
        found.append((metric, help_text, counts))
    return found

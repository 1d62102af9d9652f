"""How often a schedule fires: the shortest time between two of its fires, read from its
expression, so that one team's schedule cannot queue a run every second.

The expression is what a JetStream message schedule takes: `@every DURATION` (Go's duration
spelling, `90s`, `1m30s`), a predefined `@hourly` ... `@yearly`, a one-shot `@at TIME`, or a
cron with seconds first (`sec min hour day month weekday`). The days only make fires rarer,
so the shortest gap of a cron is the shortest between its times of day (across midnight
included): exact whenever a day fires at all. The CLI, the API and the runners ask this one
module (SCHEDULE_MIN_INTERVAL_SECONDS).
"""

from __future__ import annotations

import re

from shared.quote import quote

__all__ = ["shortest_interval", "interval_problem", "UnreadableSchedule"]

DAY = 86400
_PREDEFINED = {
    "@yearly": 365 * DAY,
    "@annually": 365 * DAY,
    "@monthly": 28 * DAY,
    "@weekly": 7 * DAY,
    "@daily": DAY,
    "@midnight": DAY,
    "@hourly": 3600,
}
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
# The fields a time of day is made of: seconds, minutes, hours, with their ranges.
_CLOCK = (("seconds", 0, 59), ("minutes", 0, 59), ("hours", 0, 23))


class UnreadableSchedule(ValueError):
    """An expression whose cadence cannot be told; the message says which part and why."""


def _duration(text: str) -> float:
    """Seconds of a Go duration such as `1m30s` or `500ms`."""
    rest, total = text.strip(), 0.0
    if not rest:
        raise UnreadableSchedule("@every needs a duration such as 90s or 5m")
    while rest:
        found = _PART.match(rest)
        if found is None:
            raise UnreadableSchedule(
                f"@every {quote(text)} is not a duration such as 90s, 5m or 1h30m"
            )
        total += float(found[1]) * _UNITS[found[2]]
        rest = rest[found.end() :]
    return total


def _values(field: str, what: str, low: int, high: int) -> set[int]:
    """The values a cron field of seconds, minutes or hours takes."""
    found: set[int] = set()
    for part in field.split(","):
        spread, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if spread in ("*", "?"):
                first, last = low, high
            elif "-" in spread:
                first, last = (int(x) for x in spread.split("-", 1))
            else:
                first = int(spread)
                last = high if step_text else first
        except ValueError:
            raise UnreadableSchedule(
                f"the {what} field {quote(field)} is not numbers, ranges and steps"
            ) from None
        if step < 1 or not low <= first <= last <= high:
            raise UnreadableSchedule(f"the {what} field {quote(field)} is outside {low}-{high}")
        found.update(range(first, last + 1, step))
    return found


def _cron_gap(fields: list[str]) -> float:
    seconds, minutes, hours = (_values(f, *spec) for f, spec in zip(fields, _CLOCK, strict=True))
    times = sorted(h * 3600 + m * 60 + s for h in hours for m in minutes for s in seconds)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return min([*gaps, DAY - times[-1] + times[0]])


def shortest_interval(expression: str) -> float | None:
    """Seconds between the two closest fires of `expression`; None for a one-shot `@at`.
    Raises UnreadableSchedule naming what cannot be read."""
    text = expression.strip()
    word, _, rest = text.partition(" ")
    if word == "@at":
        return None
    if word == "@every":
        return _duration(rest)
    if word in _PREDEFINED and not rest.strip():
        return float(_PREDEFINED[word])
    fields = text.split()
    if len(fields) != 6:
        raise UnreadableSchedule(
            f"schedule {quote(expression)} is neither @every DURATION, a predefined @daily ..."
            " nor a cron of 6 fields with seconds first (`0 0 6 * * *`)"
        )
    return _cron_gap(fields[:3])


def interval_problem(expression: str, least: int) -> str | None:
    """Why `expression` may not be a schedule when fires must be `least` seconds apart
    (SCHEDULE_MIN_INTERVAL_SECONDS), or None."""
    try:
        gap = shortest_interval(expression)
    except UnreadableSchedule as exc:
        return str(exc)
    if gap is None or gap >= least:
        return None
    return (
        f"schedule {quote(expression)} fires {gap:g} s apart; the shortest interval allowed is"
        f" {least} s (SCHEDULE_MIN_INTERVAL_SECONDS): fire less often, such as @every {least}s"
    )

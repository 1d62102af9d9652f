"""How often a schedule fires: the shortest time between two of its fires, read from its
expression, so that one team's schedule cannot queue a run every second.

The expression is what a JetStream message schedule takes: `@every DURATION` (Go's duration
spelling, `90s`, `1m30s`), a predefined `@hourly` ... `@yearly`, a one-shot `@at TIME`, or a
cron with seconds first (`sec min hour day month weekday`; a month or weekday by number or
by name, JAN, MON). Every field is checked, and a 5-field cron is told that it lacks its
seconds. The days only make fires rarer, so the shortest gap of a cron is the shortest
between its times of day (across midnight included): exact whenever a day fires at all.
The CLI, the API and the runners ask this one module (SCHEDULE_MIN_INTERVAL_SECONDS);
shared/jobs/schedule_next.py reads the same expression for the next fire.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from jetdbt.shared.wording.short_quote import quote

__all__ = [
    "shortest_interval",
    "interval_problem",
    "read_schedule",
    "Cron",
    "UnreadableSchedule",
    "FORMS",
    "PREDEFINED",
]

DAY = 86400
# Each predefined schedule: the cron it stands for, and the shortest time between two fires.
PREDEFINED = {
    "@yearly": ("0 0 0 1 1 *", 365 * DAY),
    "@annually": ("0 0 0 1 1 *", 365 * DAY),
    "@monthly": ("0 0 0 1 * *", 28 * DAY),
    "@weekly": ("0 0 0 * * 0", 7 * DAY),
    "@daily": ("0 0 0 * * *", DAY),
    "@midnight": ("0 0 0 * * *", DAY),
    "@hourly": ("0 0 * * * *", 3600),
}
# What a schedule may be, as a refusal says it: a cron, or one of the other forms.
OTHER_FORMS = (
    "@every DURATION (`@every 30m`), " + ", ".join(PREDEFINED) + ", or @at TIME"
    " (`@at 2030-01-01T06:00:00Z`)"
)
FORMS = f"a cron of 6 fields with seconds first (`0 0 6 * * *`: 06:00 every day), {OTHER_FORMS}"
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
# A cron's six fields with their ranges, seconds first (the server refuses a weekday 7).
_FIELDS = (
    ("seconds", 0, 59),
    ("minutes", 0, 59),
    ("hours", 0, 23),
    ("days of the month", 1, 31),
    ("months", 1, 12),
    ("weekdays", 0, 6),
)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_NAMES = {
    "months": {m: i + 1 for i, m in enumerate(_MONTHS)},
    "weekdays": {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))},
}


class UnreadableSchedule(ValueError):
    """An expression whose cadence cannot be told; the message says which part and why."""


class Cron(NamedTuple):
    """The values each field of a cron takes; `any_day`/`any_weekday`: the field was `*` or
    `?` (when both day fields are restricted, a day matching either fires, as cron does)."""

    seconds: set[int]
    minutes: set[int]
    hours: set[int]
    days: set[int]
    months: set[int]
    weekdays: set[int]
    any_day: bool
    any_weekday: bool


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


def _number(text: str, what: str) -> int:
    return int(_NAMES.get(what, {}).get(text.upper(), text))


def _values(field: str, what: str, low: int, high: int) -> set[int]:
    """The values a cron field takes (names of months and weekdays read as their numbers)."""
    found: set[int] = set()
    for part in field.split(","):
        spread, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if spread in ("*", "?"):
                first, last = low, high
            elif "-" in spread:
                first, last = (_number(x, what) for x in spread.split("-", 1))
            else:
                first = _number(spread, what)
                last = high if step_text else first
        except ValueError:
            raise UnreadableSchedule(
                f"the {what} field {quote(field)} is not numbers, ranges and steps"
            ) from None
        if step < 1 or not low <= first <= last <= high:
            raise UnreadableSchedule(f"the {what} field {quote(field)} is outside {low}-{high}")
        found.update(range(first, last + 1, step))
    return found


def _cron(text: str) -> Cron:
    fields = text.split()
    if len(fields) == 5:
        raise UnreadableSchedule(
            f"schedule {quote(text)} has 5 fields: a cron here takes seconds first, 6 fields"
            f" (`0 {text}` fires at second 0 of those minutes); or write {OTHER_FORMS}"
        )
    if len(fields) != 6:
        raise UnreadableSchedule(f"schedule {quote(text)} is not a schedule; write {FORMS}")
    values = [_values(f, *spec) for f, spec in zip(fields, _FIELDS, strict=True)]
    return Cron(*values, fields[3] in ("*", "?"), fields[5] in ("*", "?"))


def read_schedule(expression: str) -> str | float | Cron:
    """What `expression` says: the time of a one-shot `@at` (text), the seconds of an
    `@every`, or a cron (a predefined one as the cron it stands for). Raises
    UnreadableSchedule naming what cannot be read."""
    text = expression.strip()
    word, _, rest = text.partition(" ")
    if word == "@at":
        return rest.strip()
    if word == "@every":
        return _duration(rest)
    if word in PREDEFINED and not rest.strip():
        return _cron(PREDEFINED[word][0])
    if word.startswith("@"):
        raise UnreadableSchedule(f"schedule {quote(expression)} is not a schedule; write {FORMS}")
    return _cron(text)


def _cron_gap(cron: Cron) -> float:
    times = sorted(
        h * 3600 + m * 60 + s for h in cron.hours for m in cron.minutes for s in cron.seconds
    )
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return min([*gaps, DAY - times[-1] + times[0]])


def shortest_interval(expression: str) -> float | None:
    """Seconds between the two closest fires of `expression`; None for a one-shot `@at`.
    Raises UnreadableSchedule naming what cannot be read."""
    word = expression.strip().split(" ", 1)[0]
    if word in PREDEFINED:
        return float(PREDEFINED[word][1])
    said = read_schedule(expression)
    if isinstance(said, str):
        return None
    return said if isinstance(said, float) else _cron_gap(said)


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

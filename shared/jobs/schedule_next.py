"""When a schedule fires next, read from its expression and time zone: a schedule shows its
next fire from the moment it exists, not only once the server's first fire has said it."""

from __future__ import annotations

import bisect
import math
import zoneinfo
from datetime import UTC, date, datetime, time, timedelta

from jetdbt.shared.jobs.schedule_interval import Cron, UnreadableSchedule, read_schedule

__all__ = ["next_fire"]

# The days looked through for a cron's next fire: a 29 February fires within four years.
_DAYS_AHEAD = 4 * 366 + 1


def _day_fires(cron: Cron, day: date) -> bool:
    if day.month not in cron.months:
        return False
    on_day, on_weekday = day.day in cron.days, (day.isoweekday() % 7) in cron.weekdays
    if cron.any_day or cron.any_weekday:
        return on_day and on_weekday
    return on_day or on_weekday


def _cron_next(cron: Cron, zone: zoneinfo.ZoneInfo, after: datetime) -> datetime | None:
    local = after.astimezone(zone)
    times = sorted(
        h * 3600 + m * 60 + s for h in cron.hours for m in cron.minutes for s in cron.seconds
    )
    for ahead in range(_DAYS_AHEAD):
        day = local.date() + timedelta(days=ahead)
        if not _day_fires(cron, day):
            continue
        first = 0
        if ahead == 0:
            now = local.hour * 3600 + local.minute * 60 + local.second
            first = bisect.bisect_right(times, now)
        for second in times[first:]:
            at = datetime.combine(day, time(second // 3600, second // 60 % 60, second % 60), zone)
            if at > after:
                return at.astimezone(UTC)
    return None


def next_fire(
    expression: str, tz: str, after: datetime, since: datetime | None = None
) -> datetime | None:
    """The first fire of `expression` (in time zone `tz`, UTC when empty) later than `after`;
    `since`: when the schedule was set, which an `@every` counts from. None when it does
    not fire again (a past `@at`), or cannot be told."""
    try:
        said = read_schedule(expression)
        zone = zoneinfo.ZoneInfo(tz or "UTC")
    except (UnreadableSchedule, ValueError, zoneinfo.ZoneInfoNotFoundError):
        return None
    if isinstance(said, str):
        try:
            at = datetime.fromisoformat(said.replace("Z", "+00:00"))
        except ValueError:
            return None
        at = at if at.tzinfo else at.replace(tzinfo=zone)
        return at.astimezone(UTC) if at > after else None
    if isinstance(said, float):
        if since is None or said <= 0:
            return None
        passed = max(0.0, (after - since).total_seconds())
        return (since + timedelta(seconds=(math.floor(passed / said) + 1) * said)).astimezone(UTC)
    return _cron_next(said, zone, after)

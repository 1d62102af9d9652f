"""How often a schedule fires, read from its expression (shared/jobs/schedule_interval.py): the
rule behind SCHEDULE_MIN_INTERVAL_SECONDS at the CLI, the API and the runners."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from jetdbt.shared.jobs.schedule_interval import (
    UnreadableSchedule,
    interval_problem,
    shortest_interval,
)
from jetdbt.shared.jobs.schedule_next import next_fire


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("@every 1s", 1),
        ("@every 1m30s", 90),
        ("@every 500ms", 0.5),
        ("* * * * * *", 1),
        ("*/10 * * * * *", 10),
        ("0 * * * * *", 60),
        ("0,30 0 6 * * *", 30),  # two fires half a minute apart, once a day
        ("0 0 6 * * 1-5", 86400),
        ("59 59 23 * * *", 86400),
        ("0 */5 9-17 * * *", 300),
        ("0 0 0,23 * * *", 3600),  # 23:00 then midnight
        ("@hourly", 3600),
        ("@daily", 86400),
        ("@at 2030-01-01T00:00:00Z", None),
    ],
)
def test_the_shortest_gap_between_two_fires(expression, seconds):
    assert shortest_interval(expression) == seconds


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("@every", "needs a duration"),
        ("@every 5 minutes", "not a duration"),
        ("0 4 * * *", "6 fields"),
        ("0 0 24 * * *", "outside 0-23"),
        ("x * * * * *", "not numbers"),
        ("*/0 * * * * *", "outside 0-59"),
    ],
)
def test_an_unreadable_expression_says_what_is_wrong(expression, said):
    with pytest.raises(UnreadableSchedule, match=said):
        shortest_interval(expression)
    assert said in interval_problem(expression, 60)


def test_the_problem_names_the_setting_and_a_cadence_that_fits():
    said = interval_problem("@every 1s", 60)
    assert "1 s apart" in said and "SCHEDULE_MIN_INTERVAL_SECONDS" in said
    assert "@every 60s" in said
    assert interval_problem("@every 60s", 60) is None
    assert interval_problem("@at 2030-01-01T00:00:00Z", 60) is None


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("0 6 * * *", "has 5 fields: a cron here takes seconds first"),
        ("0 6 * * *", "`0 0 6 * * *`"),
        ("0 0 6 32 * *", "days of the month field '32' is outside 1-31"),
        ("0 0 6 * 13 *", "months field '13' is outside 1-12"),
        ("0 0 6 * * FUNDAY", "weekdays field 'FUNDAY' is not numbers"),
        ("0 0 6 * * 7", "weekdays field '7' is outside 0-6"),  # the server refuses it too
        ("@fortnightly", "@every DURATION"),
    ],
)
def test_a_refusal_names_the_field_and_the_allowed_forms(expression, said):
    assert said in interval_problem(expression, 60)


@pytest.mark.parametrize(
    "expression", ["0 0 6 * jan-MAR MON-FRI", "0 0 6 ? * SAT", "0 30 9 1,15 * ?", "@weekly"]
)
def test_names_and_question_marks_are_read(expression):
    assert interval_problem(expression, 60) is None


@pytest.mark.parametrize(
    ("expression", "tz", "after", "fires"),
    [
        # 06:00 every day: later today, or tomorrow once it passed.
        ("0 0 6 * * *", "", "2026-03-02T05:00:00Z", "2026-03-02T06:00:00Z"),
        ("0 0 6 * * *", "", "2026-03-02T06:00:00Z", "2026-03-03T06:00:00Z"),
        # In Paris (UTC+1 in March before the change): 06:00 local is 05:00 UTC.
        ("0 0 6 * * *", "Europe/Paris", "2026-03-02T05:30:00Z", "2026-03-03T05:00:00Z"),
        # Weekdays only: a Saturday's next fire is Monday's.
        ("0 0 6 * * MON-FRI", "", "2026-03-07T12:00:00Z", "2026-03-09T06:00:00Z"),
        # Both day fields restricted: either fires (the 1st, or a Sunday).
        ("0 0 0 1 * SUN", "", "2026-03-02T00:00:00Z", "2026-03-08T00:00:00Z"),
        ("0 0 0 29 2 *", "", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"),
        ("@hourly", "", "2026-03-02T05:59:59Z", "2026-03-02T06:00:00Z"),
        # From when it was set, every 90 s.
        ("@every 90s", "", "2026-03-02T00:04:00Z", "2026-03-02T00:04:30Z"),
        ("@at 2030-01-01T06:00:00Z", "", "2026-03-02T00:00:00Z", "2030-01-01T06:00:00Z"),
        ("@at 2020-01-01T06:00:00Z", "", "2026-03-02T00:00:00Z", None),
    ],
)
def test_the_next_fire_is_told_from_the_expression(expression, tz, after, fires):
    since = datetime(2026, 3, 2, tzinfo=UTC)
    found = next_fire(expression, tz, datetime.fromisoformat(after), since)
    assert found == (datetime.fromisoformat(fires) if fires else None)

"""How often a schedule fires, read from its expression (shared/schedule_interval.py): the
rule behind SCHEDULE_MIN_INTERVAL_SECONDS at the CLI, the API and the runners."""

from __future__ import annotations

import pytest

from shared.schedule_interval import UnreadableSchedule, interval_problem, shortest_interval


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

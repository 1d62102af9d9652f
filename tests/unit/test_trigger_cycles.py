"""The cycle refusal's wording, from saved jobs and each project's writes and team: a
cycle within a team names every link; one through another team's project names none of
that team's jobs or projects."""

from __future__ import annotations

from jetdbt.services.runner.facts import trigger_checks
from jetdbt.shared.bus import commands

ORDERS = "dbt://main/main/orders"
CUSTOMERS = "dbt://main/main_b/customers"


class _Known(trigger_checks._Writes):
    """Writes and teams as the deployed graphs and deploys would say them."""

    def __init__(self, teams: dict[str, str]):
        super().__init__(bus=None)
        self.held = {"shop_a": {ORDERS: "model orders"}, "shop_b": {CUSTOMERS: "model customers"}}
        self.teams = teams


def _jobs() -> dict:
    build = commands.BuildCommand()
    return {
        ("shop_a", "closing"): commands.JobSpec(command=build, on_relation=[CUSTOMERS]),
        ("shop_b", "reads"): commands.JobSpec(command=build, on_relation=[ORDERS]),
    }


async def test_a_cycle_within_a_team_is_named_link_by_link():
    found = await trigger_checks._cycle(
        _jobs(), _Known({"shop_a": "t", "shop_b": "t"}), ("shop_a", "closing")
    )
    assert found == (
        f"cycle: job closing of project 'shop_a' on {CUSTOMERS}, which model customers of"
        f" project 'shop_b' builds in job reads on {ORDERS}, which model orders of project"
        " 'shop_a' builds in job closing"
    )


async def test_a_cycle_through_another_teams_project_names_none_of_it():
    found = await trigger_checks._cycle(
        _jobs(), _Known({"shop_a": "t", "shop_b": "other"}), ("shop_a", "closing")
    )
    assert found == (
        "cycle: job closing of project 'shop_a' would wake itself through the jobs of"
        " another team's project"
    )
    assert "shop_b" not in found and "reads" not in found


async def test_no_cycle_when_nothing_reads_back():
    jobs = _jobs()
    del jobs[("shop_b", "reads")]
    known = _Known({"shop_a": "t", "shop_b": "t"})
    assert await trigger_checks._cycle(jobs, known, ("shop_a", "closing")) is None

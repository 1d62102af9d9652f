"""Whose turn it is (services/runner/admission/fair_share.py), read from a copy of DBT_LEASES
as a runner holds it: no server needed."""

from __future__ import annotations

from jetdbt.services.runner.admission.admission import team_key
from jetdbt.services.runner.admission.fair_share import Contender, Queues, last_key
from jetdbt.services.runner.admission.lease import lease_key


def waiting(entries: dict, team: str, env: str, seq: int, *, prepared: bool = True) -> None:
    """A run of `team` waiting on `env`, as admission writes it (before it is prepared, its
    team's entry only, without the environment)."""
    value = {"run_id": f"{team}{seq}", "team": team, "seq": seq}
    if prepared:
        value["env"] = lease_key(env)
        entries[f"wait.{lease_key(env)}.{seq:016d}"] = value
    entries[f"wait.{team_key(team)}.{seq:016d}"] = value


def holding(entries: dict, team: str, env: str, slot: int, team_slot: int) -> None:
    entries[lease_key(env)] = {"team": team}
    entries[f"slot.{slot}"] = {"team": team}
    entries[f"{team_key(team)}.{team_slot}"] = {"team": team}


def order(queues: Queues, me: Contender | None = None) -> list[tuple[str, int]]:
    return [(c.team, c.seq) for c in queues.ranked(me)]


def test_a_team_holding_fewer_slots_goes_before_a_burst_submitted_first():
    entries: dict = {}
    holding(entries, "a", "ea0", 0, 0)
    for seq in range(1, 101):  # team a's hundred runs, each on an environment of its own
        waiting(entries, "a", f"ea{seq}", seq)
    waiting(entries, "b", "eb", 500)
    queues = Queues(entries, per_team=2)
    # Only each team's head contends; b holds no slot, so b's run goes first.
    assert order(queues) == [("b", 500), ("a", 1)]
    assert queues.free_slots(4) == 3


def test_ties_go_by_submission_order():
    entries: dict = {}
    waiting(entries, "b", "eb", 7)
    waiting(entries, "a", "ea", 3)
    waiting(entries, "c", "ec", 5)
    assert [seq for _, seq in order(Queues(entries, per_team=2))] == [3, 5, 7]


def test_a_run_that_cannot_start_is_no_contender():
    entries: dict = {}
    holding(entries, "a", "busy", 0, 0)
    holding(entries, "a", "a-other", 1, 1)
    waiting(entries, "a", "free", 2)  # team a holds its 2 of 2 slots
    waiting(entries, "b", "busy", 3)  # its environment is held
    waiting(entries, "c", "c-env", 4, prepared=False)  # still being prepared
    waiting(entries, "c", "c-env", 9)  # behind c's run being prepared
    assert order(Queues(entries, per_team=2)) == []


def test_teams_take_a_shared_environment_in_turns():
    entries: dict = {}
    for seq in range(1, 100):
        waiting(entries, "a", "shared", seq)
    waiting(entries, "b", "shared", 200)
    queues = Queues(entries, per_team=2)
    shared = lease_key("shared")
    assert queues.env_turn(shared).seq == 1  # nobody had it: submission order
    entries[last_key(shared)] = {"team_key": team_key("a")}
    assert Queues(entries, per_team=2).env_turn(shared).seq == 200  # a had it: b's turn
    entries[last_key(shared)] = {"team_key": team_key("b")}
    assert Queues(entries, per_team=2).env_turn(shared).seq == 1
    # A team at its slots takes no turn: the environment goes on to another team's run.
    holding(entries, "a", "elsewhere", 0, 0)
    holding(entries, "a", "elsewhere2", 1, 1)
    assert Queues(entries, per_team=2).env_turn(shared).seq == 200


def test_the_asking_run_counts_before_its_entries_are_written():
    entries: dict = {}
    holding(entries, "a", "ea0", 0, 0)
    waiting(entries, "a", "ea1", 1)
    me = Contender(0, 9, team_key("b"), "b9", "b", lease_key("eb"))
    assert order(Queues(entries, per_team=2), me) == [("b", 9), ("a", 1)]
    # Its own team's entries are itself, never a second contender.
    waiting(entries, "b", "eb", 9)
    assert order(Queues(entries, per_team=2), me) == [("b", 9), ("a", 1)]

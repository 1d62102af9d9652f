"""The rule that orders waiting runs for a free run slot (services/runner/admission/fair_share.py),
read from a copy of DBT_LEASES as a runner holds it: no server needed."""

from __future__ import annotations

from services.runner.admission.admission import team_key
from services.runner.admission.fair_share import Contender, free_slots, ranked
from services.runner.admission.lease import lease_key

A, B, C = team_key("a"), team_key("b"), team_key("c")


def waiting(entries: dict, team: str, env: str, seq: int, *, prepared: bool = True) -> None:
    """A run of `team` waiting on `env`, as admission writes it (before it is prepared, only
    its team's entry, without the environment)."""
    value = {"run_id": f"{team}{seq}", "team": team, "seq": seq}
    if prepared:
        value["env"] = lease_key(env)
        entries[f"wait.{lease_key(env)}.{seq:016d}"] = value
    entries[f"wait.{team_key(team)}.{seq:016d}"] = value


def holding(entries: dict, team: str, env: str, slot: int, team_slot: int) -> None:
    entries[lease_key(env)] = {"team": team}
    entries[f"slot.{slot}"] = {"team": team}
    entries[f"{team_key(team)}.{team_slot}"] = {"team": team}


def test_a_team_holding_fewer_slots_goes_before_a_burst_submitted_first():
    entries: dict = {}
    holding(entries, "a", "ea0", 0, 0)
    for seq in range(1, 101):  # team a's hundred runs, each on an environment of its own
        waiting(entries, "a", f"ea{seq}", seq)
    waiting(entries, "b", "eb", 500)
    order = ranked(entries, per_team=2)
    # Only each team's head contends; b holds no slot, so b's run goes first.
    assert [(c.team, c.seq) for c in order] == [("b", 500), ("a", 1)]
    assert free_slots(entries, 4) == 3


def test_ties_go_by_submission_order():
    entries: dict = {}
    waiting(entries, "b", "eb", 7)
    waiting(entries, "a", "ea", 3)
    waiting(entries, "c", "ec", 5)
    assert [c.seq for c in ranked(entries, per_team=2)] == [3, 5, 7]


def test_a_run_that_cannot_start_is_no_contender():
    entries: dict = {}
    holding(entries, "a", "busy", 0, 0)
    holding(entries, "a", "a-other", 1, 1)
    waiting(entries, "a", "free", 2)  # team a holds its 2 of 2 slots
    waiting(entries, "b", "busy", 3)  # its environment is held
    waiting(entries, "c", "c-env", 4, prepared=False)  # still being prepared
    waiting(entries, "c", "c-env", 9)  # behind c's run being prepared
    assert ranked(entries, per_team=2) == []
    # On a free environment, the first run waiting there is the one that may go.
    waiting(entries, "b", "shared", 10)
    waiting(entries, "a", "shared", 1)
    assert ranked(entries, per_team=3) == [Contender(2, 1, A, "a1", "a")]


def test_the_asking_run_counts_before_its_entries_are_written():
    entries: dict = {}
    holding(entries, "a", "ea0", 0, 0)
    waiting(entries, "a", "ea1", 1)
    me = Contender(0, 9, B, "b9", "b")
    assert ranked(entries, per_team=2, me=me) == [me, Contender(1, 1, A, "a1", "a")]
    # Its own team's entries are itself, never a second contender.
    waiting(entries, "b", "eb", 9)
    assert ranked(entries, per_team=2, me=me)[0] == me
    assert len(ranked(entries, per_team=2, me=me)) == 2

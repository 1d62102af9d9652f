"""Who takes a free run slot first: the team holding the fewest slots, then the run submitted
first, so one team's burst delays another team's run by at most one run's length.

Read from a copy of DBT_LEASES (the keys admission.py describes), never from a server, so
every runner ranks the waiting runs the same way. A contender is the head of its team's
queue (no run of its team submitted before it waits or is prepared) whose environment is
free with no run waiting on it from before, and whose team is below MAX_RUNS_PER_TEAM:
the runs that could start now if a slot were theirs. The first of them, as many as there
are free slots, try to take one; the others wait.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

__all__ = ["Contender", "ranked", "free_slots", "team_slots"]


class Contender(NamedTuple):
    """A run that may take a free slot: its rank is (slots its team holds, its seq)."""

    held: int
    seq: int
    team_key: str
    run_id: str
    team: str


def _seq(key: str) -> int:
    return int(key.rsplit(".", 1)[1])


def free_slots(entries: dict[str, dict], runs: int) -> int:
    """Run slots no run holds."""
    return runs - sum(1 for k in entries if k.startswith("slot."))


def team_slots(entries: dict[str, dict]) -> Counter:
    """Slots held, by team key (`team-<hash>.<i>` keys)."""
    return Counter(k.rsplit(".", 1)[0] for k in entries if k.startswith("team-"))


def ranked(entries: dict[str, dict], per_team: int, me: Contender | None = None) -> list:
    """The contenders in the order they take free slots; `me` counts as a contender too
    (its entries may not be written yet), when it is one."""
    heads: dict[str, tuple[int, dict]] = {}  # team key -> its first waiting run
    first_on_env: dict[str, int] = {}  # environment key -> the first run waiting on it
    for key, value in entries.items():
        if not key.startswith("wait."):
            continue
        _, owner, _ = key.split(".", 2)
        seq = _seq(key)
        if owner.startswith("team-"):
            if owner not in heads or seq < heads[owner][0]:
                heads[owner] = (seq, value)
        elif seq < first_on_env.get(owner, seq + 1):
            first_on_env[owner] = seq
    held = team_slots(entries)
    found = {me.seq: me} if me is not None else {}
    for team_key, (seq, value) in heads.items():
        env = value.get("env", "")  # "" while the run is prepared: it cannot take a slot yet
        if (
            env
            and env not in entries
            and first_on_env.get(env, seq) >= seq
            and held[team_key] < per_team
            and (me is None or team_key != me.team_key)
        ):
            found[seq] = Contender(
                held[team_key], seq, team_key, str(value.get("run_id", "")), value.get("team", "")
            )
    return sorted(found.values())

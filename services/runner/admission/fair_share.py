"""Whose turn it is: fair across teams, in submission order within a team, so one team's
burst delays another team's run by at most one run's length.

Read from a copy of DBT_LEASES (the keys admission.py describes), never from a server, so
every runner ranks the waiting runs the same way. Only the head of a team's queue (no run
of its team submitted before it waits or is prepared) may go. Two turns:

- an environment one build at a time (one DuckDB file every project writes, say) goes to
  the first head waiting on it of a team other than the one that had it last (`last.<env>`,
  written as its lease is given up and kept for the bucket's TTL), then to the first of
  that team: teams take it in turns, whoever queued more;
- a free run slot goes to the heads that could start now (their environment's turn, their
  team below MAX_RUNS_PER_TEAM), the team holding the fewest slots first, then the run
  submitted first; as many go as there are free slots.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

__all__ = ["Contender", "Queues", "last_key"]


class Contender(NamedTuple):
    """A head of its team's queue; it ranks by (slots its team holds, its seq)."""

    held: int
    seq: int
    team_key: str
    run_id: str
    team: str
    env: str


def last_key(env_key: str) -> str:
    """The key saying which team held environment `env_key` last."""
    return f"last.{env_key}"


class Queues:
    """The waiting runs and the held keys of one copy of the bucket."""

    def __init__(self, entries: dict[str, dict], per_team: int):
        self.entries, self.per_team = entries, per_team
        self.held = Counter(k.rsplit(".", 1)[0] for k in entries if k.startswith("team-"))
        self.heads: dict[str, Contender] = {}  # team key -> the first run of its queue
        for key, value in entries.items():
            _, owner, _ = key.split(".", 2) if key.startswith("wait.team-") else ("", "", "")
            seq = int(key.rsplit(".", 1)[1]) if owner else 0
            if owner and (owner not in self.heads or seq < self.heads[owner].seq):
                self.heads[owner] = Contender(
                    self.held[owner],
                    seq,
                    owner,
                    str(value.get("run_id", "")),
                    str(value.get("team", "")),
                    str(value.get("env", "")),  # "" while it is prepared: it cannot go yet
                )

    def free_slots(self, runs: int) -> int:
        """Run slots no run holds."""
        return runs - sum(1 for k in self.entries if k.startswith("slot."))

    def _with(self, me: Contender | None) -> list[Contender]:
        heads = dict(self.heads)
        if me is not None:  # its entries may not be written yet: it counts as its team's head
            heads[me.team_key] = me
        return [h for h in heads.values() if h.env and self.held[h.team_key] < self.per_team]

    def env_turn(self, env: str, me: Contender | None = None) -> Contender | None:
        """The head whose turn it is on environment `env` once it is free, or None."""
        last = self.entries.get(last_key(env), {}).get("team_key")
        waiting = [h for h in self._with(me) if h.env == env]
        return min(waiting, key=lambda h: (h.team_key == last, h.seq), default=None)

    def ranked(self, me: Contender | None = None) -> list[Contender]:
        """The heads that could start now, in the order they take free run slots."""
        return sorted(
            h for h in self._with(me) if h.env not in self.entries and self.env_turn(h.env, me) == h
        )

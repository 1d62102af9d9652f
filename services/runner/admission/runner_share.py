"""A runner's share: at most MAX_RUNS_PER_RUNNER of the runs it holds build at once.

Counted in the runner, not in DBT_LEASES: only this process admits its runs, and the look
and the count happen with no await between them, so two runs let in at once cannot both
take its last place. A run whose turn comes while its runner is full is given back
(RunnerFull): its command returns to the stream for another runner, never refused.
"""

from __future__ import annotations

__all__ = ["RunnerFull", "RunnerShare"]


class RunnerFull(Exception):
    """This runner builds its share already: the command goes back for another runner."""


class RunnerShare:
    """How many of a runner's runs hold their slots; `cap` 0 is no cap."""

    def __init__(self, cap: int):
        self.cap = cap
        self.held = 0

    def reserve(self) -> None:
        """Count one more run, or raise RunnerFull when the runner holds its share."""
        if self.cap and self.held >= self.cap:
            raise RunnerFull(
                f"this runner builds {self.held} of its {self.cap} runs (MAX_RUNS_PER_RUNNER)"
            )
        self.held += 1

    def free(self) -> None:
        self.held -= 1

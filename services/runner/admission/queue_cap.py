"""A team's queue is bounded: at most MAX_QUEUED_RUNS_PER_TEAM of its runs wait to start at
once, over every runner, so a burst (a schedule storm, a loop publishing runs) is refused at
the door instead of growing a queue other teams' runs and the runners' commands sit behind.

A place is a key of DBT_LEASES, `queued.team-<hash>.<i>`, taken with `create` like a run
slot (only one taker wins, whatever runner asks), held from before the run is prepared until
it starts or ends, renewed on the lease's beat and lost with its runner.
"""

from __future__ import annotations

import asyncio
import contextlib

from jetdbt.services.runner.admission.admission import mirror_of, team_key
from jetdbt.services.runner.admission.lease import Lease, LeaseBusy
from jetdbt.shared.bus.connection import Bus

__all__ = ["QueueFull", "Place", "take_place"]


class QueueFull(Exception):
    """Every place in the team's queue is held: the run is refused, naming the setting."""

    def __init__(self, team: str, cap: int):
        super().__init__(
            f"team {team or '(none)'} already has {cap} runs waiting to start, the most"
            f" MAX_QUEUED_RUNS_PER_TEAM allows; submit again once some have started, or"
            " cancel some (jetdbt status)"
        )


class Place:
    """A held place in a team's queue, renewed until `release`."""

    def __init__(self, lease: Lease):
        self.lease = lease
        self._keeper = asyncio.create_task(lease.keep(asyncio.Event()))

    async def release(self) -> None:
        """Give the place up (idempotent): the run started, or ends without starting."""
        # Set here as well as by `release`: the keeper must have stopped before the key goes.
        self.lease.letting_go.set()
        self._keeper.cancel()
        # gather, not a suppressed await: a cancel of the caller itself must go on.
        await asyncio.gather(self._keeper, return_exceptions=True)
        await self.lease.release()


async def take_place(bus: Bus, team: str, cap: int, holder: dict) -> Place:
    """One of `team`'s `cap` places, trying those the mirror shows free first (it may lag a
    place just given up); QueueFull when every one is held."""
    prefix = f"queued.{team_key(team)}."
    held = mirror_of(bus).live(prefix)
    for key in sorted((f"{prefix}{i}" for i in range(cap)), key=lambda k: k in held):
        lease = Lease(bus, key, f"a place in team {team}'s queue", holder)
        with contextlib.suppress(LeaseBusy):
            await lease.take()
            return Place(lease)
    raise QueueFull(team, cap)

"""What a deploy or a promotion says when other projects of the warehouse write relations its
version writes too (GET /v1/projects/{project}/overlaps): two projects building one table
overwrite each other, so it is said out loud, never left to be found later."""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

from jetdbt.services.cli.common import ApiAnswered, CliError, api_json
from jetdbt.services.cli.plural import counted
from jetdbt.shared.process.config import Settings

__all__ = ["Checked", "check_overlaps", "WAIT_SECONDS"]

# The graph projection folds a version's graph a moment after its deploy ends.
WAIT_SECONDS = 15.0


class Checked(NamedTuple):
    """The API's answer (None: it could not be asked) and the lines to print."""

    answer: dict | None
    lines: list[str]


async def check_overlaps(settings: Settings, project: str, version: str) -> Checked:
    """The overlaps of `project`'s `version`: a warning line per other project, or one line
    saying they could not be checked. It never fails the deploy or promotion it follows."""
    path = f"/v1/projects/{project}/overlaps?version={version}"
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            answer = await asyncio.to_thread(api_json, settings, path)
            return Checked(answer, _lines(answer))
        except ApiAnswered as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                return Checked(None, [f"warning: overlaps with other projects unchecked: {exc}"])
        except CliError as exc:
            return Checked(None, [f"warning: overlaps with other projects unchecked: {exc}"])
        await asyncio.sleep(0.25)


def _lines(answer: dict) -> list[str]:
    lines = []
    for overlap in answer["overlaps"]:
        who = overlap["project"]
        who = f"project {who}" if who else "a project you may not read"
        shown, count = overlap["relations"], overlap["count"]
        more = f" and {count - len(shown)} more" if count > len(shown) else ""
        lines.append(
            f"warning: {who} also writes {counted(count, 'relation')} of"
            f" {answer['project']}: {', '.join(shown)}{more}; each build overwrites the"
            " other's (name a schema of its own in jetdbt.yaml: profile.schema)"
        )
    return lines

"""`jetdbt ci --api`: a pull request's check through the query API, for a CI system that holds
a deployer token (JETDBT_TOKEN) and no NATS user.

The bundle is POSTed to the project's deploys; its end is read from GET .../deploys, and,
once it went, the PR's slot from GET .../versions (the run plans with the version its slot
holds); each run is POSTed and followed on GET /v1/runs/{run_id}. The API folds the log
into what it answers, so each wait polls until the answer says the step ended.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

import msgspec
from jetdbt.services.cli.ci_ends import DeployEnd, FailedNode, RunEnd, dropped_relations
from jetdbt.services.cli.common import ApiAnswered, CliError, api_json
from jetdbt.services.cli.deploy_source import marks
from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.run_commands import packed_folder, say
from jetdbt.shared.process.config import Settings
from jetdbt.shared.runs import run_status

__all__ = ["ApiDoor"]

POLL_SECONDS = 0.5
_RUN_ENDS = (*run_status.RESULTS, run_status.REFUSED)


class ApiDoor:
    """The check's steps over the API at `api_url` (None: the stack's)."""

    def __init__(self, settings: Settings, api_url: str | None, timeout: float) -> None:
        self.settings = settings
        self.api_url = api_url
        self.timeout = timeout

    async def _json(self, path: str, **call):
        return await asyncio.to_thread(api_json, self.settings, path, api_url=self.api_url, **call)

    async def _until(self, found: Callable[[], Awaitable], what: str):
        """What `found` answers once it answers something, polling until the timeout."""
        deadline = time.monotonic() + self.timeout
        while (answer := await found()) is None:
            if time.monotonic() > deadline:
                raise CliError(
                    f"gave up waiting after {self.timeout:g}s for {what} to end; it may still"
                    " be going: wait longer with --timeout"
                )
            await asyncio.sleep(POLL_SECONDS)
        return answer

    async def deploy(self, path: Path, project: str, pr: int) -> DeployEnd:
        packed = packed_folder(path, out=sys.stderr)
        files = counted(len(packed.files), "file")
        say(f"uploading the bundle ({files}, {packed.size:,} bytes) to the API")
        asked = urlencode([("pr", pr), *(("source", mark) for mark in marks(path))])
        accepted = await self._json(
            f"/v1/projects/{project}/deploys?{asked}",
            method="POST",
            body=packed.data,
            media="application/octet-stream",
        )
        ids = (accepted["deploy_id"], accepted["command_id"])
        say(f"deploying {project} {accepted['bundle_digest'][:19]}: a runner runs dbt parse")

        async def ended():
            listed = await self._json(f"/v1/projects/{project}/deploys?limit=500")
            return next(
                (
                    d
                    for d in listed["deploys"]
                    if d["deploy_id"] in ids and d["status"] != "requested"
                ),
                None,
            )

        row = await self._until(ended, f"deploy {ids[0]} of project {project!r}")
        end = DeployEnd(
            status=row["status"], version=row["version"] or "", reason=row["reason"] or ""
        )
        if end.went():
            await self._until(
                lambda: self._holding(project, pr, end.version),
                f"the promotion of pull request {pr}",
            )
        return end

    async def _holding(self, project: str, pr: int, version: str) -> bool | None:
        listed = await self._json(f"/v1/projects/{project}/versions?limit=1000")
        held = any(v["pr"] == pr and v["version"] == version for v in listed["versions"])
        return True if held else None

    async def run(self, project: str, command) -> RunEnd:
        accepted = await self._json(
            f"/v1/projects/{project}/runs", method="POST", body=msgspec.json.encode(command)
        )
        run_id = accepted["run_id"]

        async def ended():
            try:
                run = await self._json(f"/v1/runs/{run_id}")
            except ApiAnswered as exc:
                if exc.status == 404:  # not folded yet
                    return None
                raise
            return run if run["status"] in _RUN_ENDS else None

        run = await self._until(ended, f"run {run_id} of project {project!r}")
        if run["status"] == run_status.REFUSED:
            return RunEnd(run_id=run_id, status=run["status"], reason=run["refused_reason"])
        result = run["result"] or {}
        failed = [
            FailedNode(unique_id=n["unique_id"], message=n["message"])
            for n in run["nodes"]
            if n["outcome"] == "failed"
        ]
        return RunEnd(
            run_id=run_id,
            status=run["status"],
            reason=result.get("error"),
            schema=result.get("schema"),
            deferred_to=result.get("deferred_to"),
            totals=result.get("totals") or {},
            failed=failed,
        )

    async def dropped(self, run_id: str) -> list[str]:
        """The relations the close's log names, from its pages of lines."""
        lines: list[str] = []
        after = 0
        while True:
            try:
                page = await self._json(f"/v1/runs/{run_id}/logs?after={after}&limit=1000")
            except ApiAnswered as exc:
                if exc.status in (404, 410):  # no log, or retention pruned it
                    return []
                raise
            lines += [line["text"] for line in page["lines"]]
            if not page["lines"] or page["next"] is None:
                return dropped_relations(lines)
            after = page["next"]["after"]

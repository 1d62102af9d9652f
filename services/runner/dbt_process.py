"""One dbt invocation as a subprocess: run it, stream its lines and JSON log events, wait.

dbt runs in its own job directory and its own process group, so a cancel or a
timeout kills it and everything it started. NodeStart/NodeFinished are
debug-level, so the file log is JSON at debug level and tailed while dbt runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

__all__ = ["DbtInvocation", "dbt_env"]

# Variables the runner itself uses that dbt has no business seeing.
_PRIVATE = ("NATS_URL", "DATABASE_URL")
ERROR_TAIL = 20


def dbt_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PRIVATE}
    # No call home from a runner: no usage stats, no version check over the network.
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    env["DBT_VERSION_CHECK"] = "false"
    env["DO_NOT_TRACK"] = "1"
    # Plain text on stdout: it becomes the human-readable run log.
    env["DBT_USE_COLORS"] = "false"
    env.update(extra or {})
    return env


class DbtInvocation:
    """`python -m dbt.cli.main <command> ...` in `project_dir`, with logs under `logs/`."""

    def __init__(
        self,
        command: str,
        args: list[str],
        project_dir: Path,
        profiles_dir: Path,
        env: dict[str, str],
        *,
        executable: list[str] | None = None,
        log_dir: str = "logs",
        target_dir: str = "target",
    ):
        self.project_dir = project_dir
        self.log_file = project_dir / log_dir / "dbt.log"
        self.target_dir = project_dir / target_dir
        prefix = executable or [sys.executable, "-m", "dbt.cli.main"]
        # JSON file log at debug level: NodeStart/NodeFinished are debug events.
        self.argv = [
            *prefix,
            command,
            "--project-dir",
            str(project_dir),
            "--profiles-dir",
            str(profiles_dir),
            "--target-path",
            target_dir,
            "--log-path",
            log_dir,
            "--log-format-file",
            "json",
            "--log-level-file",
            "debug",
            *args,
        ]
        self.env = env
        self.returncode: int | None = None
        self.lines: list[str] = []

    def artifact_path(self, name: str) -> Path:
        """Where this invocation's dbt writes artifact `name` (manifest.json, run_results.json)."""
        return self.target_dir / name

    def artifact(self, name: str) -> dict | None:
        """Artifact `name` as JSON, or None when dbt did not write it (or wrote it torn)."""
        try:
            return msgspec.json.decode(self.artifact_path(name).read_bytes())
        except (OSError, msgspec.DecodeError):
            return None

    def error_tail(self, count: int = ERROR_TAIL) -> str:
        """The last lines dbt printed: what a failed invocation reports when nothing else does."""
        return "\n".join(self.lines[-count:])

    async def run(
        self,
        on_line: Callable[[str], Awaitable[None]] | None = None,
        on_event: Callable[[dict], Awaitable[None]] | None = None,
        timeout: float | None = None,
    ) -> int:
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=self.project_dir,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        done = asyncio.Event()
        # dbt appends to the log of earlier invocations in this job: follow only what is new.
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        tail = asyncio.create_task(self._tail(on_event, done, offset)) if on_event else None
        try:
            async with asyncio.timeout(timeout):
                async for raw in proc.stdout:
                    line = raw.decode(errors="replace").rstrip("\n")
                    self.lines.append(line)
                    if on_line:
                        await on_line(line)
                self.returncode = await proc.wait()
        except BaseException:
            _kill(proc)
            await proc.wait()
            raise
        finally:
            done.set()
            if tail:
                await tail
        return self.returncode

    async def _tail(self, on_event, done: asyncio.Event, offset: int) -> None:
        """Follow the JSON file log until dbt exits, then read what is left."""
        handle = None
        buffer = b""
        try:
            while True:
                finished = done.is_set()
                if handle is None and self.log_file.exists():
                    handle = open(self.log_file, "rb")  # noqa: SIM115 - closed in finally
                    handle.seek(offset)
                if handle is not None:
                    buffer += handle.read()
                    *complete, buffer = buffer.split(b"\n")
                    for raw in complete:
                        with contextlib.suppress(msgspec.DecodeError):
                            await on_event(msgspec.json.decode(raw))
                if finished:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.1)
        finally:
            if handle is not None:
                handle.close()


def _kill(proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)

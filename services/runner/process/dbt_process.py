"""One dbt invocation: run it sealed, stream its lines and JSON log events, wait.

The installed dbt-core runs as a child of the runner's warm fork server (no
import cost per invocation); an engine binary is exec'd by the same server. Either
way the child has its own session (a cancel or timeout kills its whole group),
dies with the runner, sees only the environment built here, and has its own HOME
and TMPDIR inside the job.

Node events: the warm child hands dbt's NodeStart/NodeFinished over a pipe as dbt
fires them (no file log is written). An engine binary cannot, so for it the file
log is JSON at debug level (those events are debug-level) and followed while it
runs. The human-readable lines are dbt's stdout either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from jetdbt.services.runner.after import results
from jetdbt.services.runner.process import spawn
from jetdbt.services.runner.process.dbt_env import RUNNER_SETTINGS
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise

if TYPE_CHECKING:
    from jetdbt.services.runner.process.containment import JobSandbox
    from jetdbt.services.runner.provision.environments import EngineEnvironment

__all__ = ["DbtInvocation", "RunTimedOut", "ERROR_TAIL"]

ERROR_TAIL = 20
# dbt's text output starts each line it prints with the time; a message's later lines do not.
_STAMP = re.compile(r"^\d\d:\d\d:\d\d  ")
# What dbt prints before the error that ended it outside any node (a connection refused,
# a missing database, a compilation error): from here on its lines say why.
_ENCOUNTERED = "Encountered an error"
# What starts dbt's summary of the deprecations it met, printed after its error: the log
# keeps it, the reason does not.
_DEPRECATIONS = "[DeprecationsSummary]"
KEPT_LINES = 100_000
# A line longer than this is cut: it is published, kept and read as a prefix.
MAX_LINE = 16 * 1024
# dbt's node events not yet handed on (NATS away): past this, the oldest are dropped.
MAX_BACKLOG = 10_000
_PIPE_LIMIT = 1 << 20
_log = jlog.get("dbt")


class RunTimedOut(TimeoutError):
    """dbt outlived the time it was given: the only error reported as a timeout."""

    def __init__(self, seconds: float):
        super().__init__(f"timed out after {seconds:g}s")
        self.seconds = seconds


# dbt's commands that take no --target-path (their click options say so): they write no
# artifacts, and dbt refuses the flag ("No such option").
WITHOUT_TARGET_PATH = frozenset({"deps", "debug", "init"})


class DbtInvocation:
    """`dbt <command> ...` in `project_dir`, with logs under `logs/` and artifacts under `target/`;
    `command` is dbt's words, space-separated (`source freshness`).

    `executable` is None for the installed dbt-core (warm), else an engine binary's argv;
    `environment` the engine environment whose warm dbt runs it (None: jetdbt's own).
    """

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
        sandbox: JobSandbox | None = None,
        environment: EngineEnvironment | None = None,
    ):
        self.project_dir = project_dir
        self.sandbox = sandbox
        self.environment = environment
        self.log_file = project_dir / log_dir / "dbt.log"
        self.target_dir = project_dir / target_dir
        self.executable = executable
        # The warm child sends node events over a pipe: no file log. An engine binary
        # writes a JSON file log at debug level (NodeStart/NodeFinished are debug events).
        file_log = ["--log-format-file", "json", "--log-level-file", "debug"]
        self.argv = [
            *command.split(" "),  # `source freshness`, `docs generate`: dbt's two words
            "--project-dir",
            str(project_dir),
            "--profiles-dir",
            str(profiles_dir),
            *([] if command in WITHOUT_TARGET_PATH else ["--target-path", target_dir]),
            "--log-path",
            log_dir,
            *(file_log if executable else ["--log-level-file", "none"]),
            *args,
        ]
        self.env = env
        self.returncode: int | None = None
        # What a run keeps of dbt's output in memory is bounded, whatever a project prints.
        self.lines: deque[str] = deque(maxlen=KEPT_LINES)

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
        """Why dbt failed, in its own words, when no node says: its lines from the last
        "Encountered an error" on when it printed one, else its last `count` lines; the
        time stamps, blank lines and the deprecation summary after the error left out."""
        recent = list(self.lines)[-10 * count :]
        said = [_STAMP.sub("", line, count=1) for line in recent if line.strip()]
        start = max((i for i, line in enumerate(said) if line.startswith(_ENCOUNTERED)), default=0)
        end = next((i for i, line in enumerate(said) if i > start and _DEPRECATIONS in line), None)
        return "\n".join(said[start:end][-count:])

    def _sealed_env(self) -> dict[str, str]:
        """The job's own HOME and TMPDIR, beside the project: nothing shared between runs."""
        job = self.project_dir.parent
        home, tmp = job / "home", job / "tmp"
        home.mkdir(exist_ok=True)
        tmp.mkdir(exist_ok=True)
        return {**self.env, "HOME": str(home), "TMPDIR": str(tmp)}

    async def run(
        self,
        on_line: Callable[[str], Awaitable[None]] | None = None,
        on_event: Callable[[dict], Awaitable[None]] | None = None,
        timeout: float | None = None,
    ) -> int:
        """dbt's exit code; raises the sandbox's BoundExceeded, naming the bound, when it went
        past RUN_MEMORY, RUN_PIDS or RUN_DISK and did not exit 0 (a run dbt finished is
        never reported failed: a refused thread it recovered from, a nearly full folder)."""
        if self.sandbox is None:
            return await self._run(on_line, on_event, timeout, None)
        name = f"{self.project_dir.parent.name}-{uuid.uuid4().hex[:12]}"
        spec = await self.sandbox.enter(name, say=on_line)
        try:
            code = await self.sandbox.watched(self._run(on_line, on_event, timeout, spec))
        finally:
            exceeded = await self.sandbox.leave(name)
        if exceeded and code != 0:
            raise exceeded
        return code

    async def _run(self, on_line, on_event, timeout, sandbox) -> int:
        piped = on_event is not None and not self.executable
        read_fd, write_fd = os.pipe()
        events_r, events_w = os.pipe() if piped else (None, None)
        try:
            child = await spawn.spawn(
                self.argv,
                str(self.project_dir),
                self._sealed_env(),
                write_fd,
                exec_=[*self.executable, *self.argv] if self.executable else None,
                keep=sorted(RUNNER_SETTINGS),
                events_fd=events_w,
                events=results.NODE_EVENTS if piped else (),
                sandbox=sandbox,
                environment=self.environment,
            )
        except BaseException:
            for fd in (read_fd, events_r):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (write_fd, events_w):
                if fd is not None:
                    os.close(fd)
        reader, transport = await _pipe_reader(read_fd)
        done = asyncio.Event()
        if piped:
            tail = asyncio.create_task(self._follow_pipe(on_event, events_r))
        elif on_event:
            # dbt appends to the log of earlier invocations in this job: only what is new.
            offset = self.log_file.stat().st_size if self.log_file.exists() else 0
            tail = asyncio.create_task(self._tail(on_event, done, offset))
        else:
            tail = None
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                while (line := await _next_line(reader)) is not None:
                    self.lines.append(line)
                    if on_line:
                        await _guarded(on_line, line)
                self.returncode = await child.wait()
        except BaseException as exc:
            child.kill()
            with contextlib.suppress(Exception):
                await child.wait()
            if isinstance(exc, TimeoutError) and deadline.expired():
                raise RunTimedOut(timeout) from None
            raise
        finally:
            transport.close()
            done.set()
            if tail:
                await tail
        return self.returncode

    async def _follow_pipe(self, on_event, read_fd: int) -> None:
        """dbt's events from the warm child, each handed on as it arrives, until the child
        exits. The pipe is read at once into a backlog and handed on from there, so dbt
        never waits for a publish (NATS away): the build goes on, the result is rebuilt
        from run_results.json, and a backlog past MAX_BACKLOG drops its oldest."""
        reader, transport = await _pipe_reader(read_fd)
        backlog: deque[bytes] = deque(maxlen=MAX_BACKLOG)
        arrived = asyncio.Event()
        ended = False

        async def hand_on() -> None:
            while backlog or not ended:
                if not backlog:
                    arrived.clear()
                    await arrived.wait()
                    continue
                await self._deliver(on_event, backlog.popleft())

        handing = asyncio.create_task(hand_on())
        try:
            while True:
                try:
                    raw = await reader.readline()
                except ValueError:  # over the reader's limit: skipped, the result has it
                    _log.warning("dbt_event_too_long", limit=_PIPE_LIMIT)
                    continue
                if not raw:
                    break
                backlog.append(raw)
                arrived.set()
        finally:
            ended = True
            arrived.set()
            transport.close()
            await handing

    async def _deliver(self, on_event, raw: bytes) -> None:
        """One log record to `on_event`. The follower outlives a failed publish: the
        result is rebuilt from run_results.json, so a missed live event loses nothing."""
        try:
            record = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return
        await _guarded(on_event, record)

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
                        await self._deliver(on_event, raw)
                if finished:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.1)
        finally:
            if handle is not None:
                handle.close()


async def _pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """A stream over the read end of a pipe, closed with its transport."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_PIPE_LIMIT, loop=loop)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(fd, "rb", 0)
    )
    return reader, transport


async def _guarded(callback, value) -> None:
    """A line or event handed on; a failure to publish it is logged, and dbt goes on. A
    cancel (the run cancelled, its deadline) that its publish lost is raised here: dbt is
    stopped then, not left to finish a run reported cancelled."""
    try:
        await callback(value)
    except Exception as exc:  # noqa: BLE001 - logged; the build is not cut short
        _log.warning("dbt_output_not_published", error=f"{exc.__class__.__name__}: {exc}")
    supervise.cancel_lost()


async def _next_line(reader: asyncio.StreamReader) -> str | None:
    """dbt's next output line without its newline, cut at MAX_LINE; None at the end."""
    try:
        raw = await reader.readline()
    except ValueError:  # longer than the reader's limit: the rest of it comes next
        return "[jetdbt: a line over 1 MiB was dropped]"
    if not raw:
        return None
    return raw[:MAX_LINE].decode(errors="replace").rstrip("\n")

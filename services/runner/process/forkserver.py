"""The warm dbt: a process that imports dbt-core and its adapters once, then forks per invocation.

Importing dbt costs seconds; a runner pays it once here instead of once per
deploy, parse, ls, build, test and retry round. Each invocation is still a fresh
process: the child takes its own session (so a cancel kills its whole group),
dies with this server (which dies with its runner), gets only the environment it
was handed, and works in its own directory. This process never holds threads,
so a fork copies nothing half-locked.

The runner talks over one SEQPACKET socket (its descriptor is argv[2]): a request
is one JSON message carrying the child's output pipe as an attached descriptor,
and with `events` (dbt event names) a second pipe; answers are `{"id", "pid"}`
when the child exists and `{"id", "exit"}` when it ends. The child invokes dbt
through its programmatic entry point, and dbt's event callback writes each named
event to the events pipe as one JSON line (the shape of dbt's JSON log) the
moment dbt fires it: no file log to write and poll. With `exec` set the child
replaces itself with that binary (engines that are not the installed dbt-core)
after the same sealing. With `sandbox` set the child contains itself first
(services/runner/process/sandbox.py), still warm: nothing is exec'd for it.

sys.path never holds the working directory (started with -P), so a project file
named like a module (`click.py`) is never imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading

from jetdbt.services.runner.process import sandbox

PRELOAD = (
    "dbt.cli.main",
    "dbt.task.build",
    "dbt.task.deps",
    "dbt.task.list",
    "dbt.task.retry",
    "dbt.task.test",
    "dbt.parser.manifest",
    "dbt.adapters.duckdb",
    "dbt.adapters.postgres",
)
_PR_SET_PDEATHSIG = 1
# A small project this server parses and builds once before it forks anything: dbt
# builds its dataclasses' (de)serialisers and JSON schemas, compiles its materialisation
# macros and fills inspect's module caches on first use, seconds that every forked child
# would otherwise pay again. One DuckDB thread and one dbt thread: nothing is left
# running when the server forks. No static parser: that native extension leaves state
# a forked child deadlocks on in its own parse. Model c reads a source that does not
# exist: parsed, never built.
_REHEARSAL = {
    "dbt_project.yml": "name: warm\nversion: '1.0'\nconfig-version: 2\nprofile: warm\n",
    "profiles.yml": (
        "warm:\n  target: t\n  outputs:\n    t: {type: duckdb, path: warm.duckdb, threads: 1,"
        " settings: {threads: 1}}\n"
    ),
    "models/a.sql": "select {{ one() }} as id",
    "models/b.sql": "{{ config(materialized='table') }} select * from {{ ref('a') }}",
    "models/c.sql": "select * from {{ source('s', 't') }}",
    "models/i.sql": "{{ config(materialized='incremental') }} select * from {{ ref('d') }}",
    "models/schema.yml": (
        "version: 2\nmodels:\n  - name: b\n    description: b\n    columns:\n"
        "      - name: id\n        data_tests: [not_null, unique]\n"
        "sources:\n  - name: s\n    tables: [{name: t}]\n"
    ),
    "seeds/d.csv": "id\n1\n",
    "tests/e.sql": "select * from {{ ref('b') }} where id < 0",
    "macros/one.sql": "{% macro one() %}1{% endmacro %}",
}
_REHEARSED = (["parse"], ["build", "--exclude", "c"])
# A build allocates fast: Python's default (700 young objects) runs thousands of
# collections, about a sixth of a 500-model build, most of them full ones walking
# dbt's imported heap again. Frozen before the first fork and with a larger young
# generation, a child collects a few hundred times and never walks what it inherited.
_GC_THRESHOLD = (10_000, 20, 20)


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent goes; exit at once if it is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _unnamed_locks() -> None:
    """dbt makes its adapters' locks from a spawn context: named POSIX semaphores, each
    registered with multiprocessing's resource tracker so that it unlinks them at exit. A
    child's live in its sandbox's private /dev/shm and vanish with it, so the tracker warned
    of "leaked semaphore objects" at every shutdown. dbt's threads share them within one
    process: a fork context's locks, unlinked from birth, serve as well and leave nothing
    to track."""
    import multiprocessing

    with contextlib.suppress(ImportError, AttributeError):
        import dbt.mp_context

        dbt.mp_context._MP_CONTEXT = multiprocessing.get_context("fork")


def _preload(adapter: str | None = None) -> frozenset[str]:
    """Import dbt and its adapters (an engine environment's `adapter` among them); return
    the environment variables dbt reads as flags."""
    _unnamed_locks()  # first: dbt's Manifest binds its lock factory when it is imported
    for name in (*PRELOAD, *([f"dbt.adapters.{adapter}"] if adapter else [])):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    try:
        from dbt.cli.main import cli
    except ImportError:
        return frozenset()
    found: set[str] = set()
    commands = [cli]
    while commands:
        command = commands.pop()
        for param in command.params:
            names = getattr(param, "envvar", None) or ()
            found.update([names] if isinstance(names, str) else names)
        commands.extend(getattr(command, "commands", {}).values())
    failure = _rehearse() if "dbt.adapters.duckdb" in sys.modules else None
    if failure is not None:
        print(json.dumps({"event": "dbt_warm_up_failed", "error": failure[:500]}), file=sys.stderr)
    return frozenset(found)


def _rehearse() -> str | None:
    """Parse and build _REHEARSAL in a folder removed after; the failure, if any. Best
    effort: a failure leaves the children to build what they need themselves (and an
    engine environment without dbt-duckdb skips it)."""
    import tempfile
    from pathlib import Path

    from dbt.adapters.factory import reset_adapters
    from dbt.cli.main import dbtRunner

    with tempfile.TemporaryDirectory(prefix="jetdbt-warm-") as tmp:
        for name, text in _REHEARSAL.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text)
        common = ["--project-dir", tmp, "--profiles-dir", tmp, "--log-path", tmp,
                  "--log-level", "none", "--log-level-file", "none", "--no-static-parser",
                  "--no-send-anonymous-usage-stats", "--no-version-check"]  # fmt: skip
        cwd = os.getcwd()
        os.chdir(tmp)  # the warehouse file is relative to it
        try:
            for command in _REHEARSED:
                result = dbtRunner().invoke([*command, *common])
                _close_duckdb()
                reset_adapters()
                if not result.success:
                    return f"dbt {command[0]}: {result.exception or 'a node failed'}"
        finally:
            os.chdir(cwd)
    return None


def _close_duckdb() -> None:
    """dbt-duckdb keeps its database open in a class attribute across invocations: closed,
    so no child inherits a forked database."""
    with contextlib.suppress(ImportError):
        from dbt.adapters.duckdb.connections import DuckDBConnectionManager

        if DuckDBConnectionManager._ENV is not None:
            DuckDBConnectionManager._ENV.close()
        DuckDBConnectionManager.close_all_connections()


def _event_writer(fd: int, names: frozenset[str]):
    """dbt's event callback: each event named in `names` as one JSON line on `fd`, scrubbed
    of dbt's own secret variables as its JSON log would be. dbt fires from its worker
    threads, so a line is written whole under a lock."""
    from dbt.events.logging import env_scrubber
    from dbt_common.events.functions import msg_to_json

    lock = threading.Lock()

    def forward(msg) -> None:
        if msg.info.name not in names:
            return
        data = memoryview((env_scrubber(msg_to_json(msg)) + "\n").encode())
        with lock:
            while data:
                data = data[os.write(fd, data) :]

    return forward


def _hub_address(env: dict[str, str]) -> None:
    """dbt reads DBT_PACKAGE_HUB_URL once, when this server imported it: a child takes the
    address its own invocation was handed."""
    registry = sys.modules.get("dbt.clients.registry")
    if registry is not None and env.get("DBT_PACKAGE_HUB_URL"):
        registry.DEFAULT_REGISTRY_BASE_URL = env["DBT_PACKAGE_HUB_URL"]


def _invoke(argv: list[str], callbacks: list) -> int:
    """dbt's programmatic entry point; the exit code its CLI would give (0, 1 failed, 2 error)."""
    from dbt.cli.exceptions import DbtUsageException
    from dbt.cli.main import dbtRunner

    result = dbtRunner(callbacks=callbacks).invoke(argv)
    if result.success:
        return 0
    if result.exception is None:
        return 1
    if isinstance(result.exception, DbtUsageException):  # dbt printed nothing about it
        print(f"dbt: {result.exception}", flush=True)
    return 2


def _child(
    request: dict, fds: list[int], server: int, inherited: list[int], flags: frozenset[str]
) -> None:
    """In the forked child: seal, then run dbt (or exec the engine binary); never returns."""
    code = 1
    out_fd, *events_fd = fds
    try:
        for fd in events_fd:
            os.set_inheritable(fd, False)  # never held by what dbt may exec
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()
        die_with_parent(server)
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(null)
        os.close(out_fd)
        if request.get("sandbox"):
            try:
                sandbox.enter(request["sandbox"], [1, 2, *events_fd])
            except Exception as exc:  # noqa: BLE001 - said, and the child ends at once
                sandbox.fail(exc)
        os.chdir(request["cwd"])
        dropped = flags - set(request.get("keep", ()))
        env = {k: v for k, v in request["env"].items() if k not in dropped}
        os.environ.clear()
        os.environ.update(env)
        _hub_address(env)
        if request.get("exec"):
            os.execve(request["exec"][0], request["exec"], env)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = sys.stdout
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.argv = ["dbt", *request["argv"]]
        callbacks = []
        if events_fd and request.get("events"):
            callbacks.append(_event_writer(events_fd[0], frozenset(request["events"])))
        code = _invoke(request["argv"], callbacks)
    except BaseException:  # noqa: BLE001 - whatever happens, say it and exit non-zero
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _send(control: socket.socket, message: dict) -> None:
    with contextlib.suppress(OSError):
        control.send(json.dumps(message).encode())


def serve(parent: int, control_fd: int, adapter: str | None = None) -> None:
    die_with_parent(parent)
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    flags = _preload(adapter)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLD)
    children: dict[int, str] = {}
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ, "control")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    me = os.getpid()
    try:
        while True:
            for key, _ in sel.select():
                if key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
                    _reap(control, children)
                    continue
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 2)
                if not message:
                    return  # the runner is gone: so are its builds
                request = json.loads(message)
                if not fds:
                    _send(control, {"id": request["id"], "error": "no output descriptor"})
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, me, [control_fd, wake_r, wake_w], flags)
                for fd in fds:
                    os.close(fd)
                children[pid] = request["id"]
                _send(control, {"id": request["id"], "pid": pid})
    finally:
        for pid in children:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def _reap(control: socket.socket, children: dict[int, str]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request_id = children.pop(pid, None)
        if request_id is not None:
            _send(control, {"id": request_id, "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)

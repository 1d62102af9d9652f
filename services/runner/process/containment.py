"""The runner's side of the sandbox: what each dbt invocation may see, reach and use.

One `Containment` per runner. It checks once, with a real sandboxed child, that this
machine gives what services/runner/process/sandbox.py needs (namespaces, a writable cgroup);
where something is missing it says exactly what, and the runner refuses every project
until the operator provides it or sets JETDBT_SANDBOX=off (reported by the runner's start
line and /healthz). For each invocation it names the folders the child sees and the one
warehouse endpoint it may reach, and makes the invocation's cgroup with RUN_MEMORY,
RUN_CPUS and RUN_PIDS; each job folder holds at most RUN_DISK (job_disk.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jetdbt import services, shared
from jetdbt.services.runner.egress.gate import Gate
from jetdbt.services.runner.process import cgroup, job_disk, sandbox
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import Settings

__all__ = ["Containment", "JobSandbox", "SandboxMissing", "BoundExceeded", "readable_code"]

_log = jlog.get("sandbox")

# Where the egress gate listens inside a sandbox, and the variables HTTP(S) clients read.
GATE_PORT = 3128
_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")


class SandboxMissing(RuntimeError):
    """This runner cannot contain a run, and JETDBT_SANDBOX is not off."""


class BoundExceeded(RuntimeError):
    """An invocation went past a bound of its run (RUN_MEMORY, RUN_PIDS, RUN_DISK): the
    message names it, and the run fails with it."""


def readable_code() -> list[str]:
    """What a child must read beside the system: Python and jetdbt's own packages (never
    the folder above them, which may hold JETDBT_HOME)."""
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    places |= {str(Path(p.__file__).resolve().parent) for p in (services, shared)}
    return sorted(places)


def format_bytes(n: int) -> str:
    for unit, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


class Containment:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.enabled = settings.sandbox
        self.caps = cgroup.Caps(settings.run_memory, settings.run_cpus, settings.run_pids)
        self.disk = job_disk.DiskBound(settings.run_disk, settings.runner_cache)
        self.hierarchy: cgroup.Hierarchy | None = None
        self.missing: str | None = None  # why runs are refused; None: contained, or off
        self.gate = Gate(settings.egress_hosts_file)  # its folder made with a first listener
        self._checked: asyncio.Future | None = None

    def describe(self) -> str:
        """The runner's start line and /healthz say this."""
        if not self.enabled:
            return "off (JETDBT_SANDBOX=off): project code runs with the runner's authority"
        if self.missing:
            return f"missing: {self.missing}"
        if self.hierarchy is None:
            return "on: not checked yet (the runner checks it when it starts)"
        limits = (
            f"RUN_MEMORY={format_bytes(self.caps.memory)}, RUN_CPUS={self.caps.cpus:g},"
            f" RUN_PIDS={self.caps.pids}"
        )
        return (
            f"on: mount, pid, network, ipc and uts namespaces, uid {self._uid()}, {limits},"
            f" {self.hierarchy.describe()}; RUN_DISK={format_bytes(self.disk.size)}:"
            f" {self.disk.describe()}; {self.gate.describe()}"
        )

    def state(self) -> tuple[str, bool]:
        """For /healthz: the description, and whether this runner refuses every project."""
        return self.describe(), bool(self.enabled and self.missing)

    def _uid(self) -> int | str:
        return self.settings.sandbox_uid if os.geteuid() == 0 else "mapped (user namespace)"

    async def check(self) -> None:
        """Raise SandboxMissing when runs must be refused; checked once per runner."""
        if not self.enabled:
            return
        if self._checked is None:
            self._checked = asyncio.ensure_future(self._probe())
        await asyncio.shield(self._checked)
        if self.missing:
            raise SandboxMissing(
                f"this runner cannot sandbox project code ({self.missing}); an operator"
                " provides it, or sets JETDBT_SANDBOX=off to run projects uncontained"
            )

    async def _probe(self) -> None:
        """Find the cgroup hierarchy, then build one real sandbox, its job folder a
        filesystem of its own where the runner can mount one, in a process of its own."""
        try:
            self.hierarchy = await asyncio.to_thread(cgroup.find, self.settings.cgroup)
        except cgroup.CgroupUnavailable as exc:
            self.missing = str(exc)
            return
        await asyncio.to_thread(self.hierarchy.sweep)
        from jetdbt.services.runner.process.dbt_env import sealed_environment

        probe = self.settings.runner_cache / "jobs" / f"probe-{uuid.uuid4().hex}"
        probe.mkdir(parents=True)
        try:
            mounted = await job_disk.mounted(self.disk.probe, probe)
        except asyncio.CancelledError:  # a runner stopped while it starts: nothing left behind
            await asyncio.to_thread(_remove_tree, probe)
            raise
        try:
            spec = await self.spec(probe, None, name=probe.name)
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "jetdbt.services.runner.process.sandbox",
                cwd="/", env=sealed_environment(), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, said = await child.communicate(json.dumps(spec).encode())
        finally:
            await self.release(probe.name, probe)
            if mounted is not None:
                mounted.detach()
            await asyncio.to_thread(_remove_tree, probe)
        if child.returncode != 0:
            text = said.decode(errors="replace").strip().replace(sandbox.SETUP_MARK, "").strip()
            self.missing = text or f"a sandboxed process exited with {child.returncode}"
        _log.info("sandbox_checked", sandbox=self.describe())

    def check_writable(self, plan: Any) -> None:
        """A file warehouse's folder becomes writable in the sandbox: never the machine's
        root nor a folder that holds, or lies in, the runner's own code; and JETDBT_HOME
        (or anything holding or inside it, the engine environments and caches) only when it
        is exactly the folder an operator configured (JETDBT_HOME inside it stays hidden).
        A ValueError names the folder and why."""
        folder = plan.warehouse_folder
        if folder is None:
            return
        if folder == "/":
            raise ValueError(
                "the warehouse's file lies in / , which would make the whole machine"
                " writable by project code: put the warehouse file in a folder of its own"
            )
        where = Path(folder)
        code = [Path(p).resolve() for p in readable_code()]
        runner = [self.settings.home, self.settings.runner_cache, self.settings.engine_environments]
        runner += [self.settings.engines_dir] if self.settings.engines_dir else []
        guarded = [(p, "the runner's own code") for p in code]
        if folder != plan.configured_folder:
            guarded += [(Path(p).resolve(), "JETDBT_HOME or the runner's data") for p in runner]
        for place, what in guarded:
            if where == place or place in where.parents or where in place.parents:
                raise ValueError(
                    f"the warehouse's folder {folder} would be writable by project code and"
                    f" overlaps {what} ({place}): only a folder an operator configured for"
                    " the warehouse may lie there; put the file in a folder of its own"
                )

    async def spec(
        self,
        root: Path,
        plan: Any,
        *,
        name: str,
        readonly: tuple[str, ...] = (),
        host_network: bool = False,
        say: Callable[[str], Awaitable[None]] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict | None:
        """What invocation `name` in job `root` may see and reach, its cgroup made; None
        with the sandbox off. `plan` (None for the probe) names the warehouse; `readonly`
        are more folders it reads (a package tree); `host_network` is for `dbt deps`
        alone, which fetches from git and the package hub (its tools unsteerable by a
        project's env: descriptor.py, job_setup.py). `say` writes a line of the run's log
        (a host the gate refused), `labels` name the run in the gate's log lines."""
        if not self.enabled:
            return None
        group = await asyncio.to_thread(self.hierarchy.group, name, self.caps)
        spec: dict[str, Any] = {
            "root": str(root),
            "readonly": readable_code(),
            "writable": [],
            "hide": [str(self.settings.home.resolve())],
            "uid": self.settings.sandbox_uid,
            "cgroups": group.procs,
        }
        if self.settings.engines_dir is not None:
            spec["readonly"].append(str(self.settings.engines_dir))
        spec["readonly"] += [str(p) for p in self.settings.sandbox_read] + list(readonly)
        if host_network:
            spec["host_network"] = True
        elif plan is not None:
            spec["routes"] = []
            for host, port in plan.endpoints:
                if host.startswith("/"):
                    socket = Path(host) / f".s.PGSQL.{port}"
                    spec["readonly"].append(str(socket))  # the socket alone, not its folder
                else:  # a private endpoint named in JETDBT_EGRESS_HOSTS_FILE is reached there
                    to = next(iter(self.gate.resolver.mapped(host)), host)
                    spec["routes"].append({"host": host, "port": port, "to": [str(to), port]})
            await self._through_gate(spec, name, plan, say, labels)
        if plan is not None and plan.warehouse_folder:
            spec["writable"].append(plan.warehouse_folder)
        return spec

    async def _through_gate(self, spec: dict, name: str, plan: Any, say, labels) -> None:
        """Every HTTP(S) client of the invocation is pointed at its own listener of the
        egress gate, which lets through what `plan.egress` allows; its inside port is one
        no warehouse route of 127.0.0.1 takes."""
        if plan.egress is None:
            return
        path = await self.gate.open(name, plan.egress, say, **labels)
        taken = {r["port"] for r in spec["routes"] if r["host"] in ("127.0.0.1", "localhost")}
        port = next(p for p in range(GATE_PORT, GATE_PORT + 64) if p not in taken)
        spec["routes"].append({"host": "127.0.0.1", "port": port, "to": path})
        proxy = f"http://127.0.0.1:{port}"
        spec["env"] = {var: proxy for var in _PROXY_VARIABLES} | {"NO_PROXY": "", "no_proxy": ""}

    async def close(self) -> None:
        """The gate's listeners gone, with the runner."""
        await self.gate.stop()

    async def release(self, name: str, root: Path) -> BoundExceeded | None:
        """Remove invocation `name`'s cgroup and its gate listener; the bound it went past,
        if any, its job folder being `root`."""
        await self.gate.close(name)
        if not self.enabled or self.hierarchy is None:
            return None
        group = self.hierarchy.named(name)
        killed = await asyncio.to_thread(group.oom_killed)
        refused = await asyncio.to_thread(group.pids_refused)
        await asyncio.to_thread(group.remove)
        if killed:
            return BoundExceeded(
                f"dbt was killed: it used more than RUN_MEMORY={format_bytes(self.caps.memory)}"
                " (the memory each run may use; an operator raises RUN_MEMORY)"
            )
        if refused:
            return BoundExceeded(
                f"dbt could not start a process or thread: it reached RUN_PIDS={self.caps.pids}"
                " (the processes and threads each run may have; an operator raises RUN_PIDS)"
            )
        if await asyncio.to_thread(self.disk.full, root):
            return self.disk_error()
        return None

    def disk_error(self) -> BoundExceeded:
        return BoundExceeded(
            f"the job folder is full: RUN_DISK={format_bytes(self.disk.size)} (what each run's"
            " folder may hold: its project, dbt's target and logs; an operator raises RUN_DISK)"
        )


class JobSandbox:
    """One job's invocations, each in a sandbox and cgroup of its own (by name)."""

    def __init__(
        self,
        containment: Containment,
        root: Path,
        plan: Any,
        *,
        host_network=False,
        labels: dict[str, str] | None = None,
    ):
        self.containment, self.root, self.plan = containment, root, plan
        self.readonly: list[str] = []  # the package tree the job links, once it has one
        self.host_network = host_network
        self.labels = labels or {}  # the project and job, for the gate's log lines

    def for_deps(self) -> JobSandbox:
        """The same job's sandbox for `dbt deps`: the machine's network, the same folders
        shown (its engine environment among them) but not the warehouse's: nothing more."""
        deps = JobSandbox(self.containment, self.root, None, host_network=True)
        deps.readonly = list(self.readonly)
        return deps

    async def enter(
        self, name: str, say: Callable[[str], Awaitable[None]] | None = None
    ) -> dict | None:
        return await self.containment.spec(
            self.root,
            self.plan,
            name=name,
            readonly=tuple(self.readonly),
            host_network=self.host_network,
            say=say,
            labels=self.labels,
        )

    async def leave(self, name: str) -> BoundExceeded | None:
        return await self.containment.release(name, self.root)

    async def watched(self, invocation: Awaitable[int]) -> int:
        """`invocation`'s exit code; where the job folder is not a filesystem of its own,
        it is killed (cancelled) once the folder holds more than RUN_DISK."""
        disk = self.containment.disk
        if disk.mode == "mount":
            return await invocation
        run = asyncio.ensure_future(invocation)
        full = asyncio.create_task(disk.watch(self.root))
        try:
            await asyncio.wait({run, full}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            full.cancel()
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
        if run.cancelled():
            raise self.containment.disk_error()
        return run.result()


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)

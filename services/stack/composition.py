"""All services in one process: the embedded servers when no URLs are set, else the given ones.

`jetdbt up`, the demo and the tests all start the stack through here, so there is
one way the runner, the projectors and the API are wired together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass, field

from aiohttp import web
from jetdbt.projections.active import ActiveLease
from jetdbt.projections.loop import Projector
from jetdbt.projections.migrate import connect_pool
from jetdbt.projections.registry import FOLDS
from jetdbt.services.access import nats_users
from jetdbt.services.access.local import ADMIN, nats_logins
from jetdbt.services.access.tokens import admin_token
from jetdbt.services.api.app import HEADER_TIMEOUT_SECONDS, create_app
from jetdbt.services.notifier.service import Notifier
from jetdbt.services.runner.context import RunnerContext
from jetdbt.services.runner.facts.declared_writes import RelationWatch
from jetdbt.services.runner.worker import Runner
from jetdbt.services.stack.embedded import InUse, NatsServer, start_postgres
from jetdbt.services.stack.stack_file import (
    STACK_FILE,
    forget_running,
    read_stack_file,
    record_running,
)
from jetdbt.services.triggers.manager import Triggers
from jetdbt.shared.bus import contract
from jetdbt.shared.bus.connection import Bus, connect, shown, url_user
from jetdbt.shared.identity import warehouse_grants
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import Settings

__all__ = ["Stack", "StackFailed", "STACK_FILE", "ROLES", "DATABASE_ROLES", "read_stack_file"]

# The services a stack composes, each with the NATS user it connects as. A deployment runs
# each in its own process (`jetdbt serve ROLE`); a test holds compose and Kubernetes to it.
ROLES = {
    "runner": "runner",
    "projectors": "projector",
    "api": "api",  # the MCP server beside it
    "triggers": "triggers",
    "notifier": "notifier",
}
# The roles that read Postgres; runners never touch it.
DATABASE_ROLES = ("projectors", "api")


class StackFailed(RuntimeError):
    """A part of the stack could not start; the message says which and what to change."""


@dataclass
class Stack:
    settings: Settings
    runner: bool = True
    projectors: bool = True
    api: bool = True
    triggers: bool | None = None  # the triggers service; None: where the runner runs
    notifier: bool | None = None  # None: beside the runner (one process runs both locally)
    nats_url: str = ""
    database_url: str = ""
    api_url: str = ""
    mcp_url: str = ""  # the MCP server's streamable HTTP endpoint, beside the API
    bus: Bus | None = None  # the operator's (admin) connection when this stack runs NATS
    pool: object = None
    admin_token: str | None = None  # when this stack could bootstrap one (`jetdbt up`)
    _buses: dict = field(default_factory=dict)  # each service's own NATS connection
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list = field(default_factory=list)
    _nats: NatsServer | None = None
    _pg: object = None
    _site_runner: web.AppRunner | None = None
    _mcp: object = None
    _wrote_stack_file: bool = False

    @classmethod
    def serving(cls, settings: Settings, roles: set[str]) -> Stack:
        """A stack of only the given ROLES, against configured servers (`jetdbt serve`)."""
        return cls(settings, **{role: role in roles for role in ROLES})

    async def start(self) -> Stack:
        """Start every part; if one cannot start, stop what did and say what to change."""
        try:
            return await self._start()
        except InUse as exc:
            await self.stop()
            raise StackFailed(str(exc)) from None
        except BaseException:
            await self.stop()
            raise

    def dead_tasks(self) -> list[str]:
        """The service tasks that stopped on their own (each restarts itself on errors, so
        one that stopped is a bug or a fatal condition: /healthz says so)."""
        if self._stop.is_set():
            return []
        dead = [t.get_name() for t in self._tasks if t.done()]
        if self._mcp is not None and self._mcp.stopped():
            dead.append("mcp http")
        return dead

    def _serve(self, name: str, work) -> None:
        self._tasks.append(asyncio.create_task(work, name=name))

    async def _start(self) -> Stack:
        s = self.settings
        log = jlog.get("stack")
        self.nats_url = s.nats_url or ""
        if not self.nats_url:
            config = nats_users.ensure_users(s.home)
            self._nats = NatsServer(s.home / "nats", config=config).start()
            self.nats_url = self._nats.url
        self.database_url = s.database_url or ""
        needs_db = any(getattr(self, role) for role in DATABASE_ROLES)
        if needs_db and not self.database_url:
            self._pg, self.database_url = await asyncio.to_thread(start_postgres, s.home / "pg")
        await self._connect(contract.consumer_overrides(s))
        if needs_db:  # runners never touch Postgres
            self.pool = await connect_pool(self.database_url, s.schema, min_size=1, max_size=8)
        if self.projectors:
            self._serve("projectors", self._projectors())
        sandbox = lambda: (None, False)  # noqa: E731 - no runner in this process
        if self.runner:
            ctx = RunnerContext(
                bus=self._buses["runner"], settings=s, database_url=self.database_url
            )
            runner = Runner(ctx)
            sandbox = runner.ctx.containment.state
            self._serve("runner", runner.run(self._stop))
            self._serve("relation watch", RelationWatch(runner.ctx).run(self._stop))
        if self.runner if self.triggers is None else self.triggers:
            self._serve("triggers", Triggers(self._buses["triggers"]).run(self._stop))
        if self.api:
            grants = warehouse_grants.load(s.warehouses_file)
            api = create_app(
                s,
                open_pool=lambda: connect_pool(self.database_url, s.schema, min_size=1, max_size=8),
                open_bus=lambda: self._service_bus("api"),
                dead_tasks=self.dead_tasks,
                sandbox=sandbox,
                grants=grants,
            )
            self._site_runner = web.AppRunner(api, keepalive_timeout=HEADER_TIMEOUT_SECONDS)
            await self._site_runner.setup()
            site = web.TCPSite(self._site_runner, s.api_host, s.api_port)
            try:
                await site.start()
            except OSError as exc:
                raise StackFailed(
                    f"the API cannot listen on {s.api_host}:{s.api_port} ({exc.strerror});"
                    " set JETDBT_API_PORT to a free port, or stop what holds this one"
                ) from None
            port = self._site_runner.addresses[0][1]
            self.api_url = f"http://{s.api_host}:{port}"
            await self._start_mcp()
        if self.runner if self.notifier is None else self.notifier:
            notifier = Notifier(self._buses["notifier"], s, api_url=self.api_url)
            self._serve("notifier", notifier.run(self._stop))
        log.info(
            "stack_started",
            nats=shown(self.nats_url),
            api=self.api_url,
            mcp=self.mcp_url,
            schema=s.schema,
        )
        return self

    async def _projectors(self) -> None:
        """Every fold, while this process holds the projectors' lease (projections/active.py):
        a lone projector takes it at once; a second one stands by."""
        bus = self._buses["projector"]
        subjects = contract.load().projections
        projectors = [
            Projector(bus, self.pool, fold(bus), subjects[name]) for name, fold in FOLDS.items()
        ]

        async def fold(halt: asyncio.Event) -> None:
            async with asyncio.TaskGroup() as group:
                for projector in projectors:
                    group.create_task(projector.run(halt), name=f"projector {projector.fold.name}")

        s = self.settings
        lease = ActiveLease(bus, s.process_name, s.projector_lease_seconds)
        await lease.run(self._stop, fold)

    async def _start_mcp(self) -> None:
        """The MCP server beside the API: a client of the API's routes (imported only here)."""
        from jetdbt.services.mcp.http_app import McpHttp, McpPortInUse

        s = self.settings
        try:
            self._mcp = await McpHttp.start(s.api_host, s.mcp_listen_port, self.api_url)
        except McpPortInUse as exc:
            raise StackFailed(str(exc)) from None
        self.mcp_url = self._mcp.url

    async def _connect(self, overrides: dict) -> None:
        """The operator's connection applies the contract; each service then connects as
        its own NATS user, which may only check it. A server this stack did not start is
        reached as NATS_USER (or the user its URL names) for every service, one role per
        process in a deployment, and only checked then: `jetdbt contract apply` is the
        operator's step."""
        s = self.settings
        # An operator's step here: this stack's own server, or a developer's without users.
        operator = self._nats is not None or not (s.nats_user or url_user(self.nats_url))
        logins = nats_logins(s.home) if self._nats else {}
        admin = (ADMIN, logins[ADMIN]) if self._nats else (s.nats_user, s.nats_password)
        self.bus = await connect(
            self.nats_url,
            "jetdbt-stack",
            forever=True,
            consumer_overrides=overrides,
            replicas=s.stream_replicas,
            apply=operator,
            user=admin[0],
            password=admin[1],
        )
        for role in nats_users.SERVICE_USERS:
            # The API opens its own as it starts (services/api/app.py's cleanup context).
            if role != "api":
                self._buses[role] = await self._service_bus(role) if self._nats else self.bus
        if self.api and operator:
            self.admin_token = await admin_token(self.bus, s.home)

    async def _service_bus(self, role: str) -> Bus:
        """A service's own NATS connection: its own user on this stack's server, else the
        user every service of this process connects as."""
        s = self.settings
        user, password = (
            (role, nats_logins(s.home)[role]) if self._nats else (s.nats_user, s.nats_password)
        )
        return await connect(
            self.nats_url,
            f"jetdbt-{role}",
            forever=True,
            apply=False,
            replicas=s.stream_replicas,
            user=user,
            password=password,
        )

    def describe(self) -> dict:
        """What a CLI in another process needs to reach this stack. A configured NATS_URL may
        carry a password, so the file is its owner's only; a configured Postgres is not
        written (the embedded one is a local socket without a password)."""
        found = {"nats_url": self.nats_url, "api_url": self.api_url, "mcp_url": self.mcp_url}
        if self._pg is not None:
            found["database_url"] = self.database_url
        return found

    def write_stack_file(self) -> None:
        self.settings.home.mkdir(parents=True, exist_ok=True)
        path = self.settings.home / STACK_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a file left by an earlier version keeps its mode otherwise
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(self.describe()))
        self._wrote_stack_file = True
        record_running(self.settings.home)

    async def stop(self) -> None:
        self._stop.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)  # each finishes its batch, together
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._mcp is not None:
            await self._mcp.stop()
        if self._site_runner:
            await self._site_runner.cleanup()
        if self.pool:
            await self.pool.close()
        for bus in {id(b): b for b in [*self._buses.values(), self.bus] if b}.values():
            await bus.close()
        if self._nats:
            self._nats.stop()
        if self._pg is not None:
            await asyncio.to_thread(self._pg.cleanup)
        if self._wrote_stack_file:  # never another stack's (a second `up` that failed)
            with contextlib.suppress(OSError):
                (self.settings.home / STACK_FILE).unlink()
            forget_running(self.settings.home)

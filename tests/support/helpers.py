"""Small helpers shared by tests: polling the API and reading the warehouse."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import duckdb
from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import kv_keys
from nats.js.errors import KeyNotFoundError

# The token each test API answers to, by its base URL: tests/conftest.py records every
# Stack a test starts (its bootstrapped admin token); a test of another process's API
# records that one's with `use_token`.
_TOKENS: dict[str, str] = {}


def use_token(api_url: str, token: str | None) -> None:
    if token:
        _TOKENS[api_url.rstrip("/")] = token


def auth_headers(url: str, token: str | None = None) -> dict[str, str]:
    """`Authorization` for a request to `url`: `token`, else its API's recorded token."""
    if token is None:
        token = next((t for base, t in _TOKENS.items() if url.startswith(base + "/")), None)
    return {"Authorization": f"Bearer {token}"} if token else {}


async def get_json(url: str, token: str | None = None) -> tuple[int, dict]:
    headers = auth_headers(url, token)
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
        return resp.status, await resp.json()


async def get_text(url: str, token: str | None = None) -> tuple[int, str]:
    headers = auth_headers(url, token)
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
        return resp.status, await resp.text()


async def live_keys(bus, bucket: str) -> list[str]:
    """A bucket's keys that hold a value now: shared/bus/kv_keys.py's list (nats-py's `keys()`
    can read a full bucket as empty) less the deleted ones."""
    kv = await bus.js.key_value(bucket)
    found = []
    for key in await kv_keys.keys(bus, bucket):
        try:
            await kv.get(key)
        except KeyNotFoundError:
            continue
        found.append(key)
    return found


async def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1):
    """Poll an async predicate until it returns something truthy."""
    async with asyncio.timeout(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await asyncio.sleep(interval)


async def up_stack(home: Path, pg_url: str):
    """A stack as `jetdbt up` runs it in `home`: its own nats-server with the generated users
    and admin token, `pg_url` in a fresh schema, any free API and MCP ports, and the stack
    file a CLI in another process finds it by."""
    import uuid

    from jetdbt.services.stack.composition import Stack
    from jetdbt.shared.process.config import load

    settings = load(
        {
            "JETDBT_HOME": str(home),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
        }
    )
    stack = await Stack(settings).start()
    stack.write_stack_file()
    return stack


def duckdb_tables(path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    finally:
        con.close()
    return {r[0] for r in rows}


def pg_parts(url: str) -> dict:
    """host/port/user/dbname of a Postgres URL, including a unix-socket `?host=` form."""
    from urllib.parse import parse_qs, urlparse

    parsed = urlparse(url)
    query = parse_qs(parsed.query)
    return {
        "host": query.get("host", [parsed.hostname or "127.0.0.1"])[0],
        "port": parsed.port or 5432,
        "user": parsed.username or "postgres",
        "dbname": (parsed.path or "/postgres").lstrip("/") or "postgres",
    }


async def collect_everything(stack) -> list[bytes]:
    """Every event, log line and blob on the bus, and every projection row, as bytes."""
    from nats.js.api import ConsumerConfig, DeliverPolicy

    found: list[bytes] = []
    js = stack.bus.js
    for stream in ("DBT_EVENTS", "DBT_LOGS", "DBT_COMMANDS"):
        info = await js.stream_info(stream)
        if not info.state.messages:
            continue
        sub = await js.pull_subscribe(
            ">", stream=stream, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        )
        remaining = info.state.messages
        while remaining > 0:
            msgs = await sub.fetch(min(remaining, 500), timeout=5)
            found += [m.data for m in msgs]
            remaining -= len(msgs)
        await sub.unsubscribe()
    store = await js.object_store("DBT_BLOBS")
    for info in await store.list():
        if not info.deleted:  # a deploy's upload record is removed once the deploy ended
            found.append((await store.get(info.name)).data)
    async with stack.pool.acquire() as conn:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
            stack.settings.schema,
        )
        for t in tables:
            for row in await conn.fetch(f'SELECT * FROM "{t["table_name"]}"'):
                found.append(repr(dict(row)).encode())
    return found


JETDBT = str(Path(sys.executable).parent / "jetdbt")


def cli_env(stack) -> dict[str, str]:
    """The environment that points the console script at the test's stack."""
    env = {
        **os.environ,
        "NATS_URL": stack.nats_url,
        "DATABASE_URL": stack.database_url,
        "JETDBT_SCHEMA": stack.settings.schema,
        "JETDBT_API_PORT": stack.api_url.rsplit(":", 1)[1],
        # The CLI checks a schedule's cadence against the stack's own bound.
        "SCHEDULE_MIN_INTERVAL_SECONDS": str(stack.settings.schedule_min_interval_seconds),
    }
    if stack.admin_token:
        env["JETDBT_TOKEN"] = stack.admin_token
    return env


async def jetdbt(stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The console script as a user runs it, pointed at the test's stack."""
    return await asyncio.to_thread(
        subprocess.run,
        [JETDBT, *args],
        env=cli_env(stack),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def not_runners_events(js, after: int = 0) -> list[str]:
    """Every message of DBT_EVENTS past sequence `after` that is not an event as a runner
    publishes it (decodes, is a fact of the subject it is on, carries its event id as its
    message id), described; [] when the fact stream holds only runners' events."""
    import msgspec
    from jetdbt.shared.bus import events as ev
    from jetdbt.shared.bus.streams import EVENTS
    from nats.js.errors import NotFoundError

    found = []
    last = (await js.stream_info(EVENTS)).state.last_seq
    for seq in range(after + 1, last + 1):
        try:
            msg = await js.get_msg(EVENTS, seq)
        except NotFoundError:
            continue
        try:
            event = ev.decode(msg.data or b"")
        except (msgspec.DecodeError, msgspec.ValidationError):
            found.append(f"#{seq} {msg.subject}: {(msg.data or b'')[:80]!r}")
            continue
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        if not ev.fits(event, msg.subject) or not msg_id.startswith(event.event_id()):
            found.append(f"#{seq} {msg.subject}: {type(event).__name__} id {msg_id!r}")
    return found


def write_files(root: Path, files: dict[str, str]) -> None:
    """A project (or package) folder from {relative path: text}."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def closed_port() -> int:
    """A loopback port nobody listens on: what an unreachable server answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_tracked(root: Path, dest: Path) -> None:
    """What a clone of `root` holds: its tracked files (and new ones git does not ignore)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=root, capture_output=True,
        text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in tracked:
        if (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)


async def deploy_and_wait(bus, folder: Path, project: str, **kwargs) -> ev.Deployed:
    """Deploy `folder` as `project` over NATS and wait for its end: a Deployed, or the test
    fails naming what ended the deploy instead."""
    _, final = await client.deploy(bus, folder, project, **kwargs)
    assert isinstance(final, ev.Deployed), final
    return final


async def run_log(stack, run_id: str) -> str:
    """A run's whole log as the API answers it (GET /v1/runs/{run_id}/logs), page by page."""
    lines, after = [], 0
    while True:
        status, body = await get_json(f"{stack.api_url}/v1/runs/{run_id}/logs?after={after}")
        assert status == 200, body
        lines += [line["text"] for line in body["lines"]]
        if not body["next"] or not body["lines"]:
            return "\n".join(lines)
        after = body["lines"][-1]["line"]

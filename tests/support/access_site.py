"""One stack shared by a module's access tests: two teams' projects deployed, a token per
person, and the calls those tests make (HTTP with a bearer, the CLI, a NATS system user)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import msgspec
import nats
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus.connection import inbox_prefix

from tests.support.helpers import JETDBT, wait_for

ANALYTICS, BILLING = "analytics_shop", "billing_shop"


def tiny_project(folder: Path, name: str) -> Path:
    (folder / "models").mkdir(parents=True)
    (folder / "dbt_project.yml").write_text(
        f'name: {name}\nversion: "1.0.0"\nconfig-version: 2\nprofile: {name}\n'
    )
    (folder / "models" / "fine.sql").write_text("select 1 as id\n")
    (folder / "models" / "broken.sql").write_text("select * from no_such_table\n")
    return folder


class Site(msgspec.Struct, kw_only=True):
    stack: Stack
    home: Path
    tokens: dict[str, str]
    token_ids: dict[str, str]


async def call(site: Site, method: str, path: str, who: str | None = None, **kwargs):
    headers = {"Authorization": f"Bearer {site.tokens[who]}"} if who else {}
    headers.update(kwargs.pop("headers", {}))
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, site.stack.api_url + path, headers=headers, **kwargs) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def finished(site: Site, run_id: str, who: str = "alice") -> dict:
    async def done():
        status, body = await call(site, "GET", f"/v1/runs/{run_id}", who)
        return body if status == 200 and body["finished_at"] else None

    return await wait_for(done, timeout=180, interval=0.3)


async def cli(site: Site, *args: str, principal: str | None = None):
    """The CLI against the site's stack, as the operator, speaking for `principal` if given."""
    env = {"PATH": "/usr/bin:/bin", "JETDBT_HOME": str(site.home)}
    if principal:
        env["JETDBT_PRINCIPAL"] = principal
    proc = await asyncio.create_subprocess_exec(
        JETDBT, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def system(site: Site, name: str, password: str):
    violations: list[str] = []

    async def on_error(exc):
        violations.append(str(exc))

    nc = await nats.connect(
        site.stack.nats_url,
        user=name,
        password=password,
        inbox_prefix=inbox_prefix(name),
        error_cb=on_error,
        max_reconnect_attempts=0,
    )
    return nc, violations

"""What the MCP door costs an agent: `jetdbt mcp` from start to its first tool list, and one
tool call over each transport beside the same REST call made directly.

Starts a stack of its own as `jetdbt up` does (embedded nats-server with generated users,
Postgres or DATABASE_URL; no runner: nothing is built), then times, by wall clock: STARTS
starts of `jetdbt mcp` with the admin token until `list_tools` answers, and CALLS calls
of `list_projects` over streamable HTTP and over stdio beside `GET /v1/projects`. Not a
test: it prints the figures (p50 and p95) side by side.

    .venv/bin/python bench/bench_mcp.py [CALLS]   (default 200; STARTS is 5)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import httpx2  # noqa: E402
from jetdbt.services.stack.composition import Stack  # noqa: E402
from jetdbt.shared.process import logging as jlog  # noqa: E402
from jetdbt.shared.process.config import load  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

STARTS = 5
JETDBT = str(Path(sys.executable).parent / "jetdbt")


def _line(what: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"{what:<44} p50 {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   ({len(ms)})"


async def _timed(call, n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


async def main(calls: int) -> int:
    jlog.configure("warning")
    with tempfile.TemporaryDirectory() as tmp:
        env_vars = {"JETDBT_HOME": str(Path(tmp) / "home"), "JETDBT_API_PORT": "0"}
        if os.environ.get("DATABASE_URL"):
            env_vars["DATABASE_URL"] = os.environ["DATABASE_URL"]
        stack = await Stack(load(env_vars), runner=False).start()
        stack.write_stack_file()
        try:
            token = stack.admin_token
            stdio = StdioServerParameters(command=JETDBT, args=["mcp"], env=env_vars)

            async def start_and_list() -> None:
                async with Client(stdio) as mcp:
                    await mcp.list_tools()

            starts = await _timed(start_and_list, STARTS)
            print(_line("jetdbt mcp: start to its first tool list", starts))
            headers = {"Authorization": f"Bearer {token}"}
            async with aiohttp.ClientSession(headers=headers) as rest:

                async def direct() -> None:
                    async with rest.get(f"{stack.api_url}/v1/projects") as resp:
                        await resp.read()

                print(_line("GET /v1/projects, directly", await _timed(direct, calls)))
            async with (
                httpx2.AsyncClient(headers=headers, timeout=60) as http,
                Client(streamable_http_client(stack.mcp_url, http_client=http)) as mcp,
            ):
                times = await _timed(lambda: mcp.call_tool("list_projects", {}), calls)
                print(_line("list_projects over streamable HTTP", times))
            async with Client(stdio) as mcp:
                times = await _timed(lambda: mcp.call_tool("list_projects", {}), calls)
                print(_line("list_projects over stdio", times))
        finally:
            await stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)))

"""Health that means something: /healthz says 503 when NATS is away past its grace or a
service task died; a connection the server closed is opened again; `jetdbt up` that
cannot start stops what it started and names the setting to change."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from jetdbt.services.api import health_routes
from jetdbt.services.stack.composition import read_stack_file

from tests.support.helpers import get_json, wait_for
from tests.support.processes import processes_mentioning


async def test_healthz_is_503_when_nats_is_away_past_its_grace(stack, nats_server, monkeypatch):
    monkeypatch.setattr(health_routes, "NATS_GRACE_SECONDS", 1.0)
    status, body = await get_json(f"{stack.api_url}/healthz")
    assert status == 200 and body["ok"] and body["nats"]
    nats_server.stop()

    async def unhealthy():
        status, body = await get_json(f"{stack.api_url}/healthz")
        return body if status == 503 else None

    body = await wait_for(unhealthy, timeout=20)
    assert any(p.startswith("NATS away for") for p in body["problems"])
    nats_server.start()

    async def healthy():
        status, _ = await get_json(f"{stack.api_url}/healthz")
        return status == 200

    await wait_for(healthy, timeout=30)


async def test_healthz_asks_nats_and_is_503_while_the_server_is_stopped(
    stack, nats_server, monkeypatch
):
    """A nats-server stopped with SIGSTOP keeps its socket open, so a connection's state says
    connected; /healthz asks JetStream within its deadline and tells the truth."""
    monkeypatch.setattr(health_routes, "NATS_GRACE_SECONDS", 1.0)
    monkeypatch.setattr(health_routes, "NATS_DEADLINE_SECONDS", 0.5)
    status, body = await get_json(f"{stack.api_url}/healthz")
    assert status == 200 and body["nats"] is True
    pid = nats_server._proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        status, body = await get_json(f"{stack.api_url}/healthz")
        assert body["nats"] is False  # at once: the first unanswered round trip
        assert stack.bus.nc.is_connected  # what the old answer read

        async def unhealthy():
            status, body = await get_json(f"{stack.api_url}/healthz")
            return body if status == 503 else None

        body = await wait_for(unhealthy, timeout=20)
        assert any(p.startswith("NATS away for") for p in body["problems"]), body
    finally:
        os.kill(pid, signal.SIGCONT)

    async def healthy():
        status, body = await get_json(f"{stack.api_url}/healthz")
        return status == 200 and body["nats"]

    await wait_for(healthy, timeout=30)


async def test_healthz_is_503_when_a_service_task_died(stack):
    """Every service loop restarts itself on errors, so one that ends is a fatal bug: a
    task of the stack's that ended is reported by name."""

    async def fatal():
        raise RuntimeError("a bug")

    stack._serve("projector broken", fatal())
    await asyncio.sleep(0.1)
    status, body = await get_json(f"{stack.api_url}/healthz")
    assert status == 503 and body["problems"] == ["projector broken stopped"]


async def test_a_connection_the_server_closed_is_opened_again(stack):
    """A subject over the server's limit makes it close the connection for good; the
    services open a new one and go on serving commands."""
    closed = stack.bus.nc
    await closed.publish("dbt.x." + "x" * 5000, b"")

    async def reopened():
        return stack.bus.nc is not closed and stack.bus.nc.is_connected

    await wait_for(reopened, timeout=20)
    refused = await stack.bus.js.publish("dbt.cmd.run.after_close", b'{"command": {}}')

    async def answered():
        status, body = await get_json(f"{stack.api_url}/v1/runs/c{refused.seq}")
        return body if status == 200 and body["status"] == "refused" else None

    await wait_for(answered, timeout=30)


async def test_a_connection_closed_without_its_callback_is_opened_again(stack):
    """nats-py can close a connection without calling its closed callback (a server error
    racing the end of the socket): the bus notices the closed connection by itself."""
    closed = stack.bus.nc
    closed._closed_cb = None  # the race, made certain
    await closed.close()

    async def reopened():
        return stack.bus.nc is not closed and stack.bus.nc.is_connected

    await wait_for(reopened, timeout=20)
    await stack.bus.js.account_info()


def test_up_that_cannot_listen_stops_what_it_started_and_names_the_setting(tmp_path):
    home = tmp_path / "home"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
        env.update({"JETDBT_HOME": str(home), "JETDBT_API_PORT": str(port)})
        done = subprocess.run(
            [str(Path(sys.executable).parent / "jetdbt"), "up"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "JETDBT_API_PORT" in done.stderr
    assert not processes_mentioning(str(home)), "a server of the failed start still runs"


async def test_closing_the_terminal_of_up_stops_everything_it_started(tmp_path):
    """SIGHUP (the terminal window closed) stops `jetdbt up` and its servers."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    env.update({"JETDBT_HOME": str(home), "JETDBT_API_PORT": "0"})
    up = subprocess.Popen(
        [str(Path(sys.executable).parent / "jetdbt"), "up"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_for(lambda: asyncio.to_thread((home / "stack.json").exists), timeout=90)
        assert processes_mentioning(str(home))  # its nats-server and Postgres
        up.send_signal(signal.SIGHUP)
        assert await asyncio.to_thread(up.wait, 60) == 0
        assert not processes_mentioning(str(home)), "a server of jetdbt up outlived it"
    finally:
        if up.poll() is None:
            up.kill()


def _server(pid: int) -> bool:
    """Whether `pid` is an embedded nats-server or Postgres."""
    try:
        program = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return Path(program.decode()).name in ("nats-server", "postgres")


async def test_a_second_up_on_one_folder_leaves_the_first_ones_servers_alone(tmp_path):
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    env.update({"JETDBT_HOME": str(home), "JETDBT_API_PORT": "0"})
    up = [str(Path(sys.executable).parent / "jetdbt"), "up"]
    first = subprocess.Popen(up, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: asyncio.to_thread((home / "stack.json").exists), timeout=90)
        # The first's servers; a start-up check's short-lived tools (mkfs, mount)
        # may come and go meanwhile.
        running = {p for p in processes_mentioning(str(home)) if _server(p)}
        assert len(running) == 2, running  # its nats-server and its Postgres
        second = await asyncio.to_thread(
            subprocess.run, up, env=env, capture_output=True, text=True, timeout=120
        )
        assert second.returncode != 0
        assert f"in use by jetdbt process {first.pid}" in second.stderr
        assert running <= set(processes_mentioning(str(home)))  # nothing was stopped
        status, _ = await get_json(read_stack_file(home)["api_url"] + "/healthz")
        assert status == 200
    finally:
        first.send_signal(signal.SIGTERM)
        await asyncio.to_thread(first.wait, 60)

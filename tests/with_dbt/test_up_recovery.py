"""`jetdbt up` SIGKILLed in the middle of a build (a laptop crash): nothing it started
goes on building, and `jetdbt up` started again in the same folder completes the run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from jetdbt.services.access.local import admin_token_file, nats_logins
from jetdbt.services.stack.composition import read_stack_file
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.connection import connect

from tests.support.gate import add_gate, until_gate_runs
from tests.support.helpers import get_json, use_token, wait_for
from tests.support.processes import mounted_under, processes_mentioning, working_in

pytestmark = pytest.mark.dbt
BIN = Path(sys.executable).parent / "jetdbt"


def _up(env: dict, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(BIN), "up"],
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


async def _stack_file(home: Path, up: subprocess.Popen, log: Path, after: float = 0.0) -> dict:
    """The stack file `up` wrote once it started; an `up` that ended first says why."""

    async def written():
        assert up.poll() is None, log.read_text()[-3000:]
        path = home / "stack.json"
        return path.exists() and path.stat().st_mtime > after and read_stack_file(home)

    return await wait_for(written, timeout=90)


async def test_a_killed_up_leaves_no_build_and_a_restart_completes_the_run(tmp_path, project_copy):
    home = tmp_path / "home"
    release = tmp_path / "release"
    add_gate(project_copy, release)
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    tmp_path.chmod(0o755)  # runs read the gate's release file here, as their sandbox uid
    env.update(
        {
            "JETDBT_HOME": str(home),
            "JETDBT_SANDBOX_READ": str(tmp_path),
            "JETDBT_API_PORT": "0",  # the stack file says which: no port to lose meanwhile
            "RUN_ACK_WAIT_SECONDS": "4",
        }
    )
    log = tmp_path / "up.log"
    first = _up(env, log)
    second = None
    try:
        found = await _stack_file(home, first, log)
        use_token(found["api_url"], admin_token_file(home).read_text().strip())
        deploy = await asyncio.to_thread(
            subprocess.run,
            [str(BIN), "deploy", str(project_copy), "--project", "crash"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert deploy.returncode == 0, deploy.stderr
        admin = nats_logins(home)["admin"]
        bus = await connect(found["nats_url"], "test", ensure=False, user="admin", password=admin)
        try:
            command = RunCommand(command=BuildCommand(), run_id="crash1")
            await bus.publish_command("run", "crash", command, "crash1", principal="tester")
        finally:
            await bus.close()

        await until_gate_runs(found["api_url"], "crash1")
        stamp = (home / "stack.json").stat().st_mtime
        os.kill(first.pid, signal.SIGKILL)
        first.wait()

        async def no_build_left():
            return not working_in(home / "runner")

        await wait_for(no_build_left, timeout=5, interval=0.05)
        release.touch()

        second = _up(env, log)
        found = await _stack_file(home, second, log, after=stamp)
        use_token(found["api_url"], admin_token_file(home).read_text().strip())

        async def passed():
            status, body = await get_json(f"{found['api_url']}/v1/runs/crash1")
            return body if status == 200 and body["status"] in ("passed", "failed") else None

        body = await wait_for(passed, timeout=180)
        assert body["status"] == "passed", body.get("result")
        assert body["attempt"] == 2 and body["lost_attempts"] == [1]
        nodes = {n["unique_id"]: n["outcome"] for n in body["nodes"]}
        assert len(nodes) == 24 and "running" not in msgspec.json.encode(body["nodes"]).decode()
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(60)
        left = {
            p: Path(f"/proc/{p}/cmdline").read_bytes()[:200]
            for p in processes_mentioning(str(home))
        }
        assert not left, left
        assert not mounted_under(home), "the second start swept the first's job folders"
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(60)
        for pid in processes_mentioning(str(home)):  # only when an assertion failed
            os.kill(pid, signal.SIGKILL)

"""Project code against the sandbox, on the stack `jetdbt up` runs (its own nats-server with
the generated users, so the access files are really there), with real dbt.

Each attack is a model of one project: SQL through DuckDB's file functions, or a Python
model. A Python model ends by raising what it found, so its node's message is the verdict;
a SQL attack must fail. No secret of the stack may appear anywhere afterwards.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
import uuid
from pathlib import Path

import msgspec
import pytest
import pytest_asyncio
import yaml
from jetdbt.services.access.local import nats_logins
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.process.config import load

from tests.support.attack_models import build_and_read, verdict, write_dedented
from tests.support.helpers import (
    collect_everything,
    deploy_and_wait,
    get_json,
    pg_parts,
    run_log,
    use_token,
    wait_for,
)
from tests.support.processes import mounted_under

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

CANARY = "sibling-canary-" + uuid.uuid4().hex
TABLE = "{{ config(materialized='table') }} "  # a view would not read its file


def _project(folder: Path, name: str, models: dict[str, str]) -> Path:
    files = {"dbt_project.yml": f"name: {name}\nversion: '1.0'\nconfig-version: 2\nprofile: p\n"}
    files |= {f"models/{k}": v for k, v in models.items()}
    return write_dedented(folder, files)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("sandbox")
    home = root / "home"
    warehouses = root / "warehouses.yaml"
    warehouses.write_text(
        yaml.safe_dump(
            {
                "warehouses": {
                    "main": {"type": "duckdb", "path": str(root / "wh-main" / "w.duckdb")},
                    "other": {"type": "duckdb", "path": str(root / "wh-other" / "w.duckdb")},
                }
            }
        )
    )
    settings = load(
        {
            "JETDBT_HOME": str(home),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
            "JETDBT_WAREHOUSES": str(warehouses),
            "RUN_MEMORY": "1g",
            "RUN_DISK": "64m",
        }
    )
    stack = await Stack(settings).start()
    use_token(stack.api_url, stack.admin_token)
    yield stack, root
    await stack.stop()


async def _status(url: str, wanted: str) -> bool:
    status, run = await get_json(url)
    return status == 200 and run["status"] == wanted


def _secrets(stack) -> list[str]:
    """Every NATS password the stack generated under JETDBT_HOME/access, and its admin token."""
    found = [*nats_logins(stack.settings.home).values(), stack.admin_token]
    assert all(found) and len(found) > 3, "the stack keeps no secret to look for"
    return found


async def test_project_code_reaches_nothing_of_the_stack(site):
    stack, root = site
    home = stack.settings.home
    sibling = home / "runner" / "jobs" / "sibling" / "profiles"
    sibling.mkdir(parents=True)
    (sibling / "profiles.yml").write_text(f"p: {{password: {CANARY}}}\n")
    nats_port = int(stack.nats_url.rsplit(":", 1)[1])
    api_port = int(stack.api_url.rsplit(":", 1)[1])
    models = {
        "read_access.sql": TABLE + f"select * from read_csv('{home}/access/nats-users.json')",
        "read_access_relative.sql": (
            TABLE + "select * from read_csv('../../../../access/nats-users.json')"
        ),
        "write_outside.sql": (
            "{{ config(pre_hook=\"copy (select 1 as x) to '" + str(root / "escaped.csv") + "'\") }}"
            " select 1 as id"
        ),
        "write_relative.sql": (
            "{{ config(pre_hook=\"copy (select 1 as x) to '../../../../../escaped2.csv'\") }}"
            " select 1 as id"
        ),
        "sibling.py": verdict(
            f"""
            try:
                found = open({str(sibling / "profiles.yml")!r}).read()
            except OSError as exc:
                found = type(exc).__name__
            found = [found, sorted(__import__('os').listdir({str(home / "runner" / "jobs")!r}))]
            """
        ),
        "procs.py": verdict(
            f"""
            import os
            pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
            found = {{'pids': pids, 'runner': os.path.exists('/proc/{os.getpid()}'),
                     'uid': os.getuid(), 'home': os.path.exists({str(home)!r}) and
                     os.listdir({str(home)!r})}}
            """
        ),
        "sockets.py": verdict(
            f"""
            import socket
            found = {{}}
            for name, address in (('nats', ('127.0.0.1', {nats_port})),
                                  ('api', ('127.0.0.1', {api_port})),
                                  ('outside', ('192.0.2.1', 80))):
                try:
                    socket.create_connection(address, timeout=3).close()
                    found[name] = 'connected'
                except OSError as exc:
                    found[name] = type(exc).__name__ + ': ' + str(exc.strerror)
            """
        ),
        "egress.py": verdict(
            f"""
            import os, socket, urllib.parse, urllib.request
            found = {{}}
            try:
                urllib.request.urlopen('https://example.com/', timeout=10).close()
                found['https'] = 'fetched'
            except OSError as exc:
                found['https'] = type(exc).__name__ + ': ' + str(exc)
            try:
                found['dns'] = socket.getaddrinfo('example.com', 443)
            except OSError as exc:
                found['dns'] = type(exc).__name__
            proxy = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])
            for name, head in (('nats', 'CONNECT 127.0.0.1:{nats_port} HTTP/1.1'),
                               ('metadata', 'GET http://169.254.169.254/ HTTP/1.1')):
                with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
                    s.sendall(head.encode() + b'\\r\\nHost: x\\r\\n\\r\\n')
                    found[name] = s.recv(4096).split(b'\\r\\n')[0].decode()
            """
        ),
    }
    folder = _project(root / "attack", "attack_shop", models)
    final, nodes = await build_and_read(stack, folder, "attack_shop")
    assert final.result.status == "failed"

    for name in ("read_access", "read_access_relative"):
        assert nodes[name]["outcome"] == "failed", nodes[name]
        assert "No files found" in nodes[name]["message"], nodes[name]["message"]
    for name in ("write_outside", "write_relative"):
        assert nodes[name]["outcome"] == "failed", nodes[name]
    assert not (root / "escaped.csv").exists() and not (root / "escaped2.csv").exists()

    sibling_seen = nodes["sibling"]["message"]
    assert "FileNotFoundError" in sibling_seen and "'sibling'" not in sibling_seen, sibling_seen
    seen = nodes["procs"]["message"]
    uid = stack.settings.sandbox_uid if os.geteuid() == 0 else 0
    assert "'runner': False" in seen and f"'uid': {uid}" in seen, seen
    assert "'pids': [1]" in seen or "'pids': [1, " in seen, seen
    assert "'home': ['runner']" in seen, seen  # only the way down to its own job
    net = nodes["sockets"]["message"]
    assert "connected" not in net, net
    assert "'nats': 'ConnectionRefusedError" in net and "'api': 'ConnectionRefusedError" in net
    assert "'outside': 'OSError: Network is unreachable'" in net, net

    # HTTP(S) leaves only through the egress gate, which lets no host through that the
    # warehouse does not need (a DuckDB file needs none), and names no address directly.
    egress = nodes["egress"]["message"]
    assert "'https': 'URLError: <urlopen error Tunnel connection failed: 403" in egress, egress
    assert "'dns': 'gaierror'" in egress, egress
    assert "'nats': 'HTTP/1.1 403" in egress and "'metadata': 'HTTP/1.1 403" in egress, egress
    log = await run_log(stack, final.run_id)
    for refused in ("example.com:443", f"127.0.0.1:{nats_port}", "169.254.169.254:80"):
        said = [line for line in log.splitlines() if f"egress to {refused} refused" in line]
        assert said and "allow_hosts" in said[0], (refused, log[-3000:])

    found = await collect_everything(stack)
    for secret in [*_secrets(stack), CANARY]:
        assert not [b[:200] for b in found if secret.encode() in b], secret


async def test_a_memory_bomb_fails_its_run_naming_run_memory_and_spares_the_other(site):
    stack, root = site
    bomb = _project(
        root / "bomb",
        "bomb_shop",
        {
            "fine.sql": "select 1 as id",
            "bomb.py": (
                "def model(dbt, session):\n"
                "    dbt.ref('fine')\n"
                "    hoard = [bytearray(1 << 26) for _ in range(64)]\n"
                "    return session.sql('select 1 as id')\n"
            ),
        },
    )
    calm = _project(root / "calm", "calm_shop", {"a.sql": "select 1 as id"})
    write_dedented(calm, {"jetdbt.yaml": "profile:\n  warehouse: other\n"})
    await asyncio.gather(
        deploy_and_wait(stack.bus, bomb, "bomb_shop"), deploy_and_wait(stack.bus, calm, "calm_shop")
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    exploded, passed = await asyncio.gather(
        client.run(stack.bus, "bomb_shop", RunCommand(command=BuildCommand())),
        client.run(stack.bus, "calm_shop", RunCommand(command=BuildCommand())),
    )
    assert isinstance(exploded, ev.RunFinished) and exploded.result.status == "failed"
    assert "RUN_MEMORY=1g" in exploded.result.error, exploded.result.error
    assert loop.time() - started < 120
    assert isinstance(passed, ev.RunFinished) and passed.result.status == "passed", passed
    url = f"{stack.api_url}/v1/runs/{exploded.run_id}"
    await wait_for(lambda: _status(url, "failed"), timeout=30)
    _, run = await get_json(url)
    assert not [n for n in run["nodes"] if n["status"] == "running"], run["nodes"]
    status, health = await get_json(f"{stack.api_url}/healthz")
    assert status == 200 and health["sandbox"].startswith("on: "), health


async def _fails_naming(stack, root: Path, name: str, model: str, setting: str) -> None:
    """A build of project `name` whose model `model` (Python, after a fine one) goes past a
    bound: the run fails naming `setting`, no node is left running, and the next run of
    another project passes."""
    folder = _project(
        root / name, name, {"fine.sql": "select 1 as id", "hostile.py": textwrap.dedent(model)}
    )
    await deploy_and_wait(stack.bus, folder, name)
    final = await client.run(stack.bus, name, RunCommand(command=BuildCommand()))
    assert isinstance(final, ev.RunFinished) and final.result.status == "failed", final
    assert setting in final.result.error, final.result.error
    url = f"{stack.api_url}/v1/runs/{final.run_id}"
    await wait_for(lambda: _status(url, "failed"), timeout=30)
    _, run = await get_json(url)
    assert not [n for n in run["nodes"] if n["status"] == "running"], run["nodes"]
    calm = _project(root / f"{name}-next", f"{name}_next", {"a.sql": "select 1 as id"})
    after, _ = await build_and_read(stack, calm, f"{name}_next")
    assert after.result.status == "passed", after.result.error


async def test_a_thread_bomb_fails_its_run_naming_run_pids(site):
    stack, root = site
    model = """
        import threading

        def model(dbt, session):
            dbt.ref('fine')
            hold = threading.Event()
            for _ in range(5000):
                threading.Thread(target=hold.wait, daemon=True).start()
            return session.sql('select 1 as id')
    """
    await _fails_naming(stack, root, "threads_shop", model, "RUN_PIDS=1024")


async def test_a_disk_filler_fails_its_run_naming_run_disk_and_leaves_no_mount(site):
    stack, root = site
    model = """
        import os

        def model(dbt, session):
            dbt.ref('fine')
            with open(os.path.join(os.environ['TMPDIR'], 'fill.bin'), 'wb') as fh:
                for _ in range(128):
                    fh.write(b'x' * (1 << 20))
            return session.sql('select 1 as id')
    """
    await _fails_naming(stack, root, "filler_shop", model, "RUN_DISK=64m")

    async def unmounted() -> bool:
        return not mounted_under(stack.settings.runner_cache)

    await wait_for(unmounted, timeout=10)


async def test_a_run_dbt_finished_passes_though_it_brushed_run_pids_and_run_disk(site):
    """A model that is refused threads and recovers, then leaves its job folder nearly full:
    dbt exits 0, so the run passes (a bound fails only an invocation that did not)."""
    stack, root = site
    model = """
        import os, threading

        def model(dbt, session):
            hold, started = threading.Event(), []
            try:
                for _ in range(5000):
                    thread = threading.Thread(target=hold.wait, daemon=True)
                    thread.start()
                    started.append(thread)
            except RuntimeError:
                pass
            hold.set()
            for thread in started:
                thread.join()
            assert len(started) < 5000, 'RUN_PIDS was never reached'
            path = os.path.join(os.environ['TMPDIR'], 'fill.bin')
            with open(path, 'wb') as fh:
                try:
                    for _ in range(128):
                        fh.write(b'x' * (1 << 20))
                        fh.flush()
                except OSError:
                    pass
            os.truncate(path, max(0, os.path.getsize(path) - (256 << 10)))
            free = os.statvfs(path)
            assert free.f_bavail * free.f_frsize < (1 << 20), 'the folder is not nearly full'
            return session.sql('select 1 as id')
    """
    folder = _project(root / "brush", "brush_shop", {"brush.py": textwrap.dedent(model)})
    final, nodes = await build_and_read(stack, folder, "brush_shop")
    assert final.result.status == "passed", final.result.error
    assert nodes["brush"]["outcome"] == "passed", nodes["brush"]


async def test_a_projects_own_duckdb_file_lies_only_in_its_warehouses_folder(site):
    """The attack: a project's own profiles.yml puts its DuckDB file in /etc (or /root/.ssh),
    whose folder the sandbox would make writable and hand to its user. The deploy is refused
    naming the path, and the folder keeps its owner; a file in the warehouse's own folder
    deploys."""
    stack, root = site
    for n, place in enumerate(("/etc/x.duckdb", "/root/.ssh/x.duckdb", str(root / "x.duckdb"))):
        folder = os.path.dirname(place)
        before = os.stat(folder) if os.path.exists(folder) else None
        name = f"etc_shop{n}"
        project = _own_duckdb(root / name, name, place)
        _, refused = await client.deploy(stack.bus, project, name)
        assert isinstance(refused, ev.DeployRefused), refused
        assert f"the target's file lies in {folder}, outside warehouse 'main'" in refused.reason
        if before is not None:
            after = os.stat(folder)
            assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid), folder
        assert not os.path.exists(place)
    inside = _own_duckdb(root / "inside", "inside_shop", str(root / "wh-main" / "own.duckdb"))
    final, _ = await build_and_read(stack, inside, "inside_shop")
    assert final.result.status == "passed", final.result.error


def _own_duckdb(folder: Path, name: str, path: str) -> Path:
    """A project whose own profiles.yml is a DuckDB file at `path`, naming warehouse main."""
    output = {"type": "duckdb", "path": path, "threads": 1}
    return write_dedented(
        _project(folder, name, {"a.sql": "select 1 as id"}),
        {
            "profiles.yml": yaml.safe_dump({"p": {"target": "x", "outputs": {"x": output}}}),
            "jetdbt.yaml": "profile:\n  profiles_yml: profiles.yml\n  warehouse: main\n",
        },
    )


async def test_a_runner_without_its_primitives_refuses_projects_and_says_what_is_missing(
    settings, tmp_path
):
    missing = tmp_path / "no-cgroup"
    st = await Stack(msgspec.structs.replace(settings, cgroup=missing)).start()
    try:
        folder = _project(tmp_path / "p", "refused_shop", {"a.sql": "select 1 as id"})
        _, refused = await client.deploy(st.bus, folder, "refused_shop")
        assert isinstance(refused, ev.DeployRefused), refused
        assert str(missing) in refused.reason and "JETDBT_SANDBOX=off" in refused.reason
        status, health = await get_json(f"{st.api_url}/healthz")
        assert status == 503 and health["sandbox"].startswith("missing: "), health
        assert any("refuses every project" in p for p in health["problems"]), health
    finally:
        await st.stop()


async def test_sandbox_off_is_explicit_and_reported(settings, tmp_path):
    st = await Stack(msgspec.structs.replace(settings, sandbox=False)).start()
    try:
        status, health = await get_json(f"{st.api_url}/healthz")
        assert status == 200 and health["sandbox"].startswith("off (JETDBT_SANDBOX=off)")
        folder = _project(tmp_path / "p", "open_shop", {"a.sql": "select 1 as id"})
        final, _ = await build_and_read(st, folder, "open_shop")
        assert final.result.status == "passed"
    finally:
        await st.stop()


async def _forward(reader, writer, path: str) -> None:
    """One TCP connection joined to Postgres's socket."""
    up_reader, up_writer = await asyncio.open_unix_connection(path)

    async def pipe(src, dst):
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        finally:
            dst.close()

    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)


async def test_a_networked_warehouse_is_reached_through_the_relay_by_its_own_name(
    settings, tmp_path, project_copy, warehouse_pg_url
):
    """The warehouse is `localhost:<port>` over TCP (a forwarder to the suite's Postgres):
    dbt's profile is as written, the sandbox has no network but the relay to it."""
    parts = pg_parts(warehouse_pg_url)
    socket_path = f"{parts['host']}/.s.PGSQL.{parts['port']}"
    server = await asyncio.start_server(lambda r, w: _forward(r, w, socket_path), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    schema = f"relay_{uuid.uuid4().hex[:8]}"
    warehouses = tmp_path / "warehouses.yaml"
    warehouse = {"type": "postgres", "host": "localhost", "port": port, "user": parts["user"],
                 "dbname": parts["dbname"], "schema": schema}  # fmt: skip
    warehouses.write_text(yaml.safe_dump({"warehouses": {"main": warehouse}}))
    st = await Stack(msgspec.structs.replace(settings, warehouses_file=warehouses)).start()
    try:
        async with server:
            final, nodes = await build_and_read(st, project_copy, "jaffle_shop")
        assert final.result.status == "passed", final.result.error
        assert nodes["customers"]["outcome"] == "passed"
        assert f'"{parts["dbname"]}"' in nodes["customers"]["relation"]
    finally:
        await st.stop()

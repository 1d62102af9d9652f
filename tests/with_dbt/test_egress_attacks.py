"""A hostile project against the egress gate and the sandbox's network, on one stack with real
dbt: its Python models speak to the gate (127.0.0.1:3128 inside), to the relay's channel and
to any address directly, and raise what they got, so each node's message is the verdict. A
loopback server stands for the one host the warehouse allows (a hosts file names it), and
NATS is what every attack aims at.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.process.config import load

from tests.support.attack_models import build_and_read, verdict, write_dedented
from tests.support.echo_server import Stand
from tests.support.helpers import (
    collect_everything,
    use_token,
    wait_for,
)

pytestmark = [pytest.mark.dbt, pytest.mark.asyncio(loop_scope="module")]

ALLOWED = "allowed.example.com"
MAPPED = "mapped.example.com"  # in the hosts file, not in the warehouse's policy
PROXY_SECRET = "proxy-pw-" + uuid.uuid4().hex
WAIT = 30


def _project(folder: Path, name: str, models: dict[str, str], **more: str) -> Path:
    files = {"dbt_project.yml": f"name: {name}\nversion: '1.0'\nconfig-version: 2\nprofile: p\n"}
    return write_dedented(folder, files | {f"models/{k}": v for k, v in models.items()} | more)


# What every attack model starts with: a way to ask the gate, by its inside address.
_ASK = """
import os, socket
def ask(head, until=b'\\r\\n\\r\\n', keep=False):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(head)
    got = b''
    while until not in got:
        data = s.recv(65536)
        if not data:
            break
        got += data
    if keep:
        return s, got
    s.close()
    return got
def status(head):
    return ask(head).split(b'\\r\\n')[0].decode()
"""


def _verdict(body: str) -> str:
    """test_sandbox's verdict model, able to ask the gate."""
    return verdict(textwrap.dedent(_ASK) + textwrap.dedent(body))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("egress")
    stand = Stand()  # the allowed host: echoes, records, counts the connections that ended
    await stand.start()
    hosts = root / "hosts"
    hosts.write_text(f"127.0.0.1 {ALLOWED} {MAPPED}\n")
    warehouses = root / "warehouses.yaml"
    main = {"type": "duckdb", "path": str(root / "wh-main" / "w.duckdb"),
            "allow_hosts": [f"{ALLOWED}:{stand.port}"]}  # fmt: skip
    warehouses.write_text(yaml.safe_dump({"warehouses": {"main": main}}))
    settings = load(
        {
            "JETDBT_HOME": str(root / "home"),
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
            "JETDBT_WAREHOUSES": str(warehouses),
            "JETDBT_EGRESS_HOSTS_FILE": str(hosts),
        }
    )
    # The operator's own proxy, with its login: what dbt inherits where the sandbox is off.
    sockets = tempfile.mkdtemp(prefix="a39-")  # the gate's folder is made in here
    os.chmod(sockets, 0o755)  # the relay, as the sandbox uid, passes through
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HTTPS_PROXY", f"http://operator:{PROXY_SECRET}@proxy.example.com:3128")
        patch.setattr(tempfile, "tempdir", sockets)
        stack = await Stack(settings).start()
        use_token(stack.api_url, stack.admin_token)
        yield stack, root, stand, Path(sockets)
        await stack.stop()
    stand.server.close()


async def test_a_project_reaches_nothing_but_the_host_its_warehouse_allows(site):
    stack, root, stand, sockets = site
    nats = int(stack.nats_url.rsplit(":", 1)[1])
    port = stand.port
    heads = {
        "allowed": f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\n\r\n",
        "upper_dot": f"CONNECT ALLOWED.Example.COM.:{port} HTTP/1.1\r\n\r\n",
        "other_port": f"CONNECT {ALLOWED}:{nats} HTTP/1.1\r\n\r\n",
        "default_port": f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\n",
        "mapped": f"CONNECT {MAPPED}:{port} HTTP/1.1\r\n\r\n",
        "ip": f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n",
        "nats": f"CONNECT 127.0.0.1:{nats} HTTP/1.1\r\n\r\n",
        "localhost": f"CONNECT localhost:{nats} HTTP/1.1\r\n\r\n",
        "zero": f"CONNECT 0.0.0.0:{nats} HTTP/1.1\r\n\r\n",
        "v6": f"CONNECT [::1]:{nats} HTTP/1.1\r\n\r\n",
        "v4mapped": f"CONNECT [::ffff:127.0.0.1]:{nats} HTTP/1.1\r\n\r\n",
        "decimal": f"CONNECT 2130706433:{nats} HTTP/1.1\r\n\r\n",
        "hex": f"CONNECT 0x7f000001:{nats} HTTP/1.1\r\n\r\n",
        "octal": f"CONNECT 0177.0.0.1:{nats} HTTP/1.1\r\n\r\n",
        "short": f"CONNECT 127.1:{nats} HTTP/1.1\r\n\r\n",
        "metadata": "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
        "userinfo": f"GET http://{ALLOWED}:{port}@{MAPPED}:{port}/ HTTP/1.1\r\n\r\n",
        "plain_other": f"GET http://{MAPPED}:{port}/ HTTP/1.1\r\n\r\n",
    }
    models = {
        "proxy.py": _verdict(
            f"""
            found = {{k: status(v.encode()) for k, v in {heads!r}.items()}}
            """
        ),
        "smuggle.py": _verdict(
            f"""
            found = {{}}
            # Host header other than the URI's: the gate writes its own.
            got = ask(b'GET http://{ALLOWED}:{port}/x HTTP/1.1\\r\\nHost: {MAPPED}\\r\\n\\r\\n')
            found['host'] = got.decode()
            # Two requests in one: the second must reach the allowed host as bytes, not the gate.
            second = b'CONNECT 127.0.0.1:{nats} HTTP/1.1\\r\\n\\r\\n'
            first = b'GET http://{ALLOWED}:{port}/ HTTP/1.1\\r\\nContent-Length: 0\\r\\n\\r\\n'
            s, got = ask(first + second, until=second, keep=True)
            s.settimeout(2)
            try:
                more = s.recv(65536)
            except OSError:
                more = b''
            found['smuggled'] = (got + more).decode(errors='replace')
            # A CONNECT tunnel to the allowed host, then a CONNECT inside it.
            s, got = ask(b'CONNECT {ALLOWED}:{port} HTTP/1.1\\r\\n\\r\\n', keep=True)
            s.sendall(b'CONNECT 127.0.0.1:{nats} HTTP/1.1\\r\\n\\r\\n')
            s.settimeout(2)
            try:
                found['nested'] = (got + s.recv(65536)).decode(errors='replace')
            except OSError as exc:
                found['nested'] = repr(exc)
            """
        ),
        "direct.py": _verdict(
            f"""
            found = {{}}
            for host in ({ALLOWED!r}, 'localhost', 'example.com'):
                try:
                    found['resolve ' + host] = socket.getaddrinfo(host, 443)[0][4]
                except OSError as exc:
                    found['resolve ' + host] = type(exc).__name__
            places = [('127.0.0.1', {port}), ('127.0.0.1', {nats}), ('192.0.2.1', 80)]
            for where in places + [('169.254.169.254', 80)]:
                try:
                    socket.create_connection(where, timeout=3).close()
                    found[where] = 'connected'
                except OSError as exc:
                    found[where] = type(exc).__name__
            """
        ),
        "relay.py": _verdict(
            f"""
            found = {{}}
            channel = None
            for name in os.listdir('/proc/self/fd'):
                try:
                    s = socket.socket(fileno=os.dup(int(name)))
                except OSError:
                    continue
                if s.type == socket.SOCK_SEQPACKET:
                    channel = s
                    break
                s.close()
            found['channel'] = channel is not None
            for index in (1, 2, 255, 65535, 0):
                channel.send(b'c' + index.to_bytes(2, 'big'))
                msg, fds, _, _ = socket.recv_fds(channel, 16, 1)
                found[index] = (msg, len(fds))
                for fd in fds:
                    conn = socket.socket(fileno=fd)
                    conn.sendall(b'CONNECT 127.0.0.1:{nats} HTTP/1.1\\r\\n\\r\\n')
                    found['through 0'] = conn.recv(200).split(b'\\r\\n')[0]
                    conn.close()
            channel.send(b'c\\xff\\xff' + b'x' * 40)
            found['long'] = socket.recv_fds(channel, 16, 1)[:2]
            """
        ),
        "environ.py": _verdict(
            """
            import gc
            login = 'operator' + ':'  # spelt apart: this code's own text holds no login
            seen = lambda text: [w for w in text.split() if login in w and '@proxy.' in w]
            environ = open('/proc/self/environ', 'rb').read().decode(errors='replace')
            held = [o for o in gc.get_objects() if isinstance(o, dict) and seen(repr(o))]
            found = {'environ': seen(environ.replace('\\0', ' ')),
                     'os.environ': os.environ.get('HTTPS_PROXY'),
                     'memory': [seen(repr(o)) for o in held][:1]}
            """
        ),
        "linger.py": (
            "import socket, subprocess\n"
            "def model(dbt, session):\n"
            "    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
            f"    s.sendall(b'CONNECT {ALLOWED}:{port} HTTP/1.1\\r\\n\\r\\n')\n"
            "    s.recv(100)\n"
            "    s.sendall(b'lingering')\n"
            "    # A process of its own holds the tunnel open past the model's end.\n"
            "    subprocess.Popen(['sleep', '300'], pass_fds=[s.fileno()], start_new_session=1)\n"
            "    return session.sql('select 1 as id')\n"
        ),
        "flood.py": _verdict(
            f"""
            head = b'CONNECT n%d.{MAPPED}:443 HTTP/1.1\\r\\n\\r\\n'
            found = sorted({{status(head % i) for i in range(300)}})
            """
        ),
    }
    # One model at a time: the relay attack speaks on the channel the others' connections use.
    folder = _project(root / "attack", "egress_shop", models, **{"jetdbt.yaml": "threads: 1\n"})
    final, nodes = await build_and_read(stack, folder, "egress_shop")
    assert final.result.status == "failed"
    proxy = nodes["proxy"]["message"]
    for case in ("allowed", "upper_dot"):
        assert f"'{case}': 'HTTP/1.1 200 Connection established'" in proxy, proxy
    for case in heads.keys() - {"allowed", "upper_dot"}:
        assert f"'{case}': 'HTTP/1.1 403 Forbidden'" in proxy or (
            f"'{case}': 'HTTP/1.1 400 Bad Request'" in proxy
        ), (case, proxy)
    smuggled = nodes["smuggle"]["message"]
    assert f"Host: {MAPPED}" not in smuggled and "INFO" not in smuggled, smuggled
    assert smuggled.count("Connection established") == 1, smuggled
    direct = nodes["direct"]["message"]
    assert "connected" not in direct and f"'resolve {ALLOWED}': 'gaierror'" in direct, direct
    relay = nodes["relay"]["message"]
    assert "'channel': True" in relay, relay  # the attack reached the relay's channel
    for index in (1, 2, 255, 65535):
        assert f"{index}: (b'e', 0)" in relay, relay
    assert "0: (b'k', 1)" in relay and "'through 0': b'HTTP/1.1 403 Forbidden'" in relay
    environ = "verdict: {'environ': [], 'os.environ': 'http://127.0.0.1:3128', 'memory': []}"
    assert environ in nodes["environ"]["message"], nodes["environ"]["message"]
    assert "verdict: ['HTTP/1.1 403 Forbidden']" in nodes["flood"]["message"]
    assert nodes["linger"]["outcome"] == "passed"

    # What the run left open ended with it: every tunnel, every gate socket.
    async def all_ended() -> bool:
        return stand.ended == len(stand.got)

    await wait_for(all_ended, timeout=WAIT)
    assert b"lingering" in [bytes(got) for got in stand.got]
    assert list(sockets.glob("jetdbt-gate-*/*")) == []
    found = await collect_everything(stack)
    told = sum(b.count(b"jetdbt egress gate: egress to") for b in found)
    assert 0 < told <= 2 * 33, told  # the run's log, and its stored copy
    assert not [b[:200] for b in found if PROXY_SECRET.encode() in b]


async def test_an_own_profile_naming_a_server_is_refused_not_relayed(site):
    """The attack: a project's own profiles.yml names NATS as its `server` (dbt-sqlserver's
    spelling of the host, which the relay reaches): the relay would join NATS in."""
    stack, root, stand, sockets = site
    nats = int(stack.nats_url.rsplit(":", 1)[1])
    output = {"type": "duckdb", "path": str(root / "wh-main" / "own.duckdb"), "threads": 1,
              "server": "127.0.0.1", "port": nats}  # fmt: skip
    models = {
        "nats.py": _verdict(
            f"""
            try:
                s = socket.create_connection(('127.0.0.1', {nats}), timeout=5)
                found = s.recv(200)
            except OSError as exc:
                found = type(exc).__name__
            """
        )
    }
    folder = _project(
        root / "own", "own_shop", models,
        **{"profiles.yml": yaml.safe_dump({"p": {"target": "x", "outputs": {"x": output}}}),
           "jetdbt.yaml": "profile:\n  profiles_yml: profiles.yml\n  warehouse: main\n"},
    )  # fmt: skip
    _, refused = await client.deploy(stack.bus, folder, "own_shop")
    assert isinstance(refused, ev.DeployRefused), refused
    assert f"this project's profile connects to 127.0.0.1:{nats}, not to warehouse 'main'" in (
        refused.reason
    )

"""The egress gate over real sockets (services/runner/egress/gate.py): a client speaks HTTP to
an invocation's unix socket as a sandbox's relay would, and loopback TCP servers stand for the
hosts, reached by names a hosts file maps to them."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest
import structlog
from jetdbt.services.runner.egress import gate as gate_module
from jetdbt.services.runner.egress import resolve as resolve_module
from jetdbt.services.runner.egress.gate import Gate
from jetdbt.services.runner.egress.hosts import EgressPolicy, HostRule, policy_for
from jetdbt.services.runner.egress.resolve import AddressRefused, Resolver
from jetdbt.shared.process import logging as jlog

from tests.support.echo_server import Stand

WAIT = 5


@pytest.fixture
async def stand():
    server = Stand()
    await server.start()
    yield server
    server.server.close()


@pytest.fixture
def hosts_file(tmp_path) -> Path:
    path = tmp_path / "hosts"
    path.write_text(
        "# stand-ins for the warehouse\n"
        "127.0.0.1 warehouse.example.com ocsp.example.com\n"
        "127.0.0.2 twice.example.com  # nothing listens there\n"
        "127.0.0.1 twice.example.com\n"
    )
    return path


@pytest.fixture
async def gate(hosts_file):
    gate = Gate(hosts_file)
    yield gate
    await gate.stop()


class Run:
    """An invocation's listener and what its run's log was told."""

    def __init__(self) -> None:
        self.path = ""
        self.told: list[str] = []

    async def say(self, line: str) -> None:
        self.told.append(line)

    async def ask(self, head: bytes) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_unix_connection(self.path)
        writer.write(head)
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
        return answer, reader, writer

    async def refused(self, head: bytes) -> tuple[bytes, bytes]:
        """The status line and body of an answer that is not a way through."""
        answer, reader, writer = await self.ask(head)
        body = await asyncio.wait_for(reader.read(), WAIT)
        writer.close()
        return answer.split(b"\r\n")[0], body


async def _open(gate: Gate, policy: EgressPolicy, name: str = "inv-1") -> Run:
    run = Run()
    run.path = await gate.open(name, policy, run.say, run_id="r1", project="p")
    return run


def _policy(stand: Stand, *more: str) -> EgressPolicy:
    allow = (f"warehouse.example.com:{stand.port}", f"twice.example.com:{stand.port}", *more)
    return policy_for("wh", "snowflake", {"type": "snowflake", "account": "acct"}, allow)


async def _until(check) -> None:
    async with asyncio.timeout(WAIT):
        while not check():
            await asyncio.sleep(0.01)


async def test_connect_to_an_allowed_name_is_a_tunnel_both_ways(gate, stand):
    run = await _open(gate, _policy(stand))
    head = f"CONNECT warehouse.example.com:{stand.port} HTTP/1.1\r\nHost: x\r\n\r\n"
    answer, reader, writer = await run.ask(head.encode() + b"hello-early ")
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"
    writer.write(b"and later")
    assert await asyncio.wait_for(reader.readexactly(21), WAIT) == b"hello-early and later"
    writer.write_eof()  # a client done sending still gets what is on its way
    assert await asyncio.wait_for(reader.read(), WAIT) == b""
    assert bytes(stand.got[0]) == b"hello-early and later"
    assert run.told == [] and gate.describe() == "egress gate: 0 requests refused since start"


async def test_each_address_is_tried_in_turn(gate, stand):
    """`twice` is mapped first to 127.0.0.2, where nothing listens, then to 127.0.0.1."""
    run = await _open(gate, _policy(stand))
    answer, _, writer = await run.ask(
        f"CONNECT twice.example.com:{stand.port} HTTP/1.1\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 200")
    writer.close()
    closed = policy_for("wh", "", {}, ("warehouse.example.com:1",))
    other = await _open(gate, closed, "inv-2")
    status, body = await other.refused(b"CONNECT warehouse.example.com:1 HTTP/1.1\r\n\r\n")
    assert status == b"HTTP/1.1 502 Bad Gateway"
    assert b"warehouse.example.com:1 cannot be reached" in body


@pytest.fixture
def logs(monkeypatch):
    """The egress modules' log lines. Their loggers were bound when first imported (by
    whatever imported them first, before any capture): bound again inside this one."""
    with structlog.testing.capture_logs() as captured:
        monkeypatch.setattr(gate_module, "_log", jlog.get("egress.gate"))
        monkeypatch.setattr(resolve_module, "_log", jlog.get("egress.resolve"))
        yield captured


async def test_a_host_not_allowed_is_refused_told_logged_and_counted(gate, stand, logs):
    run = await _open(gate, _policy(stand))
    status, body = await run.refused(b"CONNECT evil.example.org:443 HTTP/1.1\r\n\r\n")
    assert status == b"HTTP/1.1 403 Forbidden"
    assert b'allow_hosts: ["evil.example.org:443"]' in body
    assert len(run.told) == 1 and run.told[0].startswith("jetdbt egress gate: egress to")
    assert 'allow_hosts: ["evil.example.org:443"]' in run.told[0]
    refused = [e for e in logs if e["event"] == "egress_refused"]
    assert refused == [
        {"event": "egress_refused", "log_level": "warning", "host": "evil.example.org",
         "port": 443, "reason": "not allowed", "warehouse": "wh", "run_id": "r1",
         "project": "p"}
    ]  # fmt: skip
    assert gate.describe() == "egress gate: 1 requests refused since start"
    assert stand.got == []


@pytest.mark.parametrize(
    "host",
    ["localhost", "127.0.0.1", "169.254.169.254", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"],
)
async def test_this_machine_and_metadata_are_never_reached_by_dns_or_address(gate, stand, host):
    """Allowed by a rule, yet refused: only the hosts file may send a name there."""
    rules = (HostRule(host.strip("[]"), stand.port, "a test's rule"),)
    run = await _open(gate, EgressPolicy("wh", "bigquery", rules))
    status, body = await run.refused(f"CONNECT {host}:{stand.port} HTTP/1.1\r\n\r\n".encode())
    assert status == b"HTTP/1.1 403 Forbidden"
    assert b"JETDBT_EGRESS_HOSTS_FILE" in body
    assert run.told and "JETDBT_EGRESS_HOSTS_FILE" in run.told[0]
    assert stand.got == []


async def test_a_plain_request_goes_on_in_origin_form_without_proxy_headers(gate, stand):
    run = await _open(gate, _policy(stand))
    head = (
        f"POST http://warehouse.example.com:{stand.port}/ocsp/x?a=1#frag HTTP/1.1\r\n"
        "Host: elsewhere.example.org\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
        "Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nbody"
    )
    sent = (
        f"POST /ocsp/x?a=1 HTTP/1.1\r\nHost: warehouse.example.com:{stand.port}\r\n"
        "Content-Length: 4\r\nConnection: close\r\n\r\nbody"
    ).encode()
    reader, writer = await asyncio.open_unix_connection(run.path)
    writer.write(head.encode())
    assert await asyncio.wait_for(reader.readexactly(len(sent)), WAIT) == sent
    assert bytes(stand.got[0]) == sent
    writer.close()


@pytest.mark.parametrize(
    ("head", "says"),
    [
        (b"hello\r\n\r\n", b"no request line"),
        (b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", b"send CONNECT"),
        (b"GET https://a.example/ HTTP/1.1\r\n\r\n", b"with CONNECT"),
        (b"CONNECT a.example HTTP/1.1\r\n\r\n", b"names no port"),
        (b"CONNECT a.example:99999 HTTP/1.1\r\n\r\n", b"no valid port"),
        (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", b"names no host"),
        (b"CONNECT a..example:443 HTTP/1.1\r\n\r\n", b"names no host"),
        (b"CONNECT 127.1:443 HTTP/1.1\r\n\r\n", b"names no host"),
        (b"GET http://u@a.example/ HTTP/1.1\r\n\r\n", b"names no user"),
        (b"CONNECT a.example:443 HTTP/2.0\r\n\r\n", b"no request line"),
        (b"CONNECT a.example:443 HTTP/1.1\r\nno colon\r\n\r\n", b"no header line"),
        (b"CONNECT a.example:443 HTTP/1.1\r\n folded: x\r\n\r\n", b"no header line"),
        (b"CONNECT a.example:443 HTTP/1.1\nX: y\r\n\r\n", b"bare CR or LF"),
        ("CONNECT \u00e4.example:443 HTTP/1.1\r\n\r\n".encode(), b"not ASCII"),
    ],
)
async def test_a_malformed_head_is_answered_400_naming_what_is_wrong(gate, stand, head, says):
    run = await _open(gate, _policy(stand))
    status, body = await run.refused(head)
    assert status == b"HTTP/1.1 400 Bad Request"
    assert says in body
    assert gate.describe().startswith("egress gate: 0 ")


async def test_an_oversized_head_is_answered_431(gate, stand):
    run = await _open(gate, _policy(stand))
    head = b"CONNECT warehouse.example.com:443 HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n"
    status, body = await run.refused(head)
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"over 16384 bytes" in body


async def test_close_cuts_every_tunnel_and_removes_the_socket(gate, stand):
    run = await _open(gate, _policy(stand))
    ask = f"CONNECT warehouse.example.com:{stand.port} HTTP/1.1\r\n\r\n".encode()
    answer, reader, writer = await run.ask(ask)
    writer.write(b"x")
    assert await asyncio.wait_for(reader.readexactly(1), WAIT) == b"x"
    await gate.close("inv-1")
    await _until(lambda: stand.ended == 1)  # the warehouse's side saw the tunnel end
    assert await asyncio.wait_for(reader.read(), WAIT) == b""
    assert not Path(run.path).exists()
    with pytest.raises(OSError):
        await asyncio.open_unix_connection(run.path)
    await gate.close("inv-1")  # a second close is nothing


async def test_one_invocation_holds_at_most_256_connections(gate, stand):
    run = await _open(gate, _policy(stand))
    held = [await asyncio.open_unix_connection(run.path) for _ in range(256)]
    await asyncio.sleep(0.2)
    status, body = await run.refused(b"CONNECT warehouse.example.com:443 HTTP/1.1\r\n\r\n")
    assert status == b"HTTP/1.1 503 Service Unavailable"
    assert b"at most 256" in body
    for _, writer in held:
        writer.close()


async def test_sockets_live_in_a_private_folder_that_stop_removes(gate, stand):
    first = await _open(gate, _policy(stand))
    second = await _open(gate, _policy(stand), "inv-2")
    folder = Path(first.path).parent
    assert folder == Path(second.path).parent and first.path != second.path
    assert len(first.path.encode()) < 107
    assert stat.S_IMODE(folder.stat().st_mode) == 0o711
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o666
    assert stat.S_ISSOCK(os.stat(first.path).st_mode)
    with pytest.raises(ValueError, match="inv-2"):
        await gate.open("inv-2", _policy(stand))
    await gate.stop()
    assert not folder.exists()


async def test_a_socket_path_too_long_for_unix_is_refused_naming_the_remedy(tmp_path, monkeypatch):
    long = tmp_path / ("d" * 80)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    gate = Gate(None)
    with pytest.raises(ValueError, match="point TMPDIR at a short folder"):
        await gate.open("inv-1", policy_for("wh", "", {}))
    await gate.stop()
    assert list(long.iterdir()) == []


async def test_the_hosts_file_is_read_again_when_it_changes(tmp_path, logs):
    path = tmp_path / "hosts"
    path.write_text("10.0.0.1 db.example.com\nnot-an-address db.example.com\n::2 db.example.com\n")
    resolver = Resolver(path)
    found = await resolver.addresses("DB.example.com.", 443)
    assert await resolver.addresses("db.example.com", 443) == found
    assert found.source == "hosts file"
    assert found.addresses == [
        (socket.AF_INET, ("10.0.0.1", 443)),
        (socket.AF_INET6, ("::2", 443, 0, 0)),
    ]
    assert [e["line"] for e in logs if e["event"] == "egress_hosts_file_skipped"] == [2]
    path.write_text("10.0.0.9 db.example.com other.example.com # moved\n")
    os.utime(path, ns=(1, 1))
    assert (await resolver.addresses("other.example.com", 80)).addresses == [
        (socket.AF_INET, ("10.0.0.9", 80))
    ]
    path.unlink()
    with pytest.raises(AddressRefused, match="add '127.0.0.1 localhost' to the file"):
        await resolver.addresses("localhost", 80)  # no file: DNS, and its answer is loopback
    assert (await Resolver(None).addresses("10.2.3.4", 5)).source == "address"


@pytest.mark.parametrize(
    "target",
    [
        "warehouse.example.com:{other}",  # an allowed name's other port
        "warehouse.example.com:443",  # its rule names a port: not the default ones
        "ocsp.example.com:{port}",  # in the hosts file, not in the policy
        "127.0.0.1:{port}",  # the allowed name's address, asked for as itself
        "[::ffff:127.0.0.1]:{port}",
        "[0:0:0:0:0:ffff:7f00:1]:{port}",
        "0.0.0.0:{port}",
        "0x7f000001:{port}",  # a resolver's hexadecimal IPv4
        "localhost:{port}",
        "warehouse.example.com.evil.example.org:{port}",
        "evil.example.org.:{port}",
    ],
)
async def test_no_spelling_of_another_host_or_port_gets_through(gate, stand, target):
    """The attack: reach something but the allowed host and port through the gate."""
    run = await _open(gate, _policy(stand))
    where = target.format(port=stand.port, other=stand.port + 1)
    for head in (f"CONNECT {where} HTTP/1.1\r\n\r\n", f"GET http://{where}/ HTTP/1.1\r\n\r\n"):
        status, _ = await run.refused(head.encode())
        assert status in (b"HTTP/1.1 403 Forbidden", b"HTTP/1.1 400 Bad Request"), (head, status)
    assert stand.got == []


@pytest.mark.parametrize(
    "target", ["2130706433:80", "0177.0.0.1:80", "127.1:80", "[::1]x:80", "a.example:80:81"]
)
async def test_a_resolvers_shorthand_for_an_address_is_no_host(gate, stand, target):
    run = await _open(gate, _policy(stand))
    status, body = await run.refused(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    assert status == b"HTTP/1.1 400 Bad Request", body
    assert gate.describe().startswith("egress gate: 0 ")


async def test_what_follows_a_request_reaches_only_its_host_as_bytes(gate, stand):
    """Smuggling: a second request after a plain one, a Host header naming another host, a
    CONNECT inside a tunnel: the gate reads one head per connection, the rest is the allowed
    host's to read."""
    run = await _open(gate, _policy(stand))
    allowed = f"warehouse.example.com:{stand.port}"
    second = b"CONNECT ocsp.example.com:443 HTTP/1.1\r\n\r\n"
    reader, writer = await asyncio.open_unix_connection(run.path)
    first = (
        f"GET http://{allowed}/a HTTP/1.1\r\nHost: ocsp.example.com\r\nContent-Length: 0\r\n\r\n"
    )
    writer.write(first.encode() + second)
    sent = f"GET /a HTTP/1.1\r\nHost: {allowed}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    echoed = await asyncio.wait_for(reader.readexactly(len(sent) + len(second)), WAIT)
    assert echoed == sent.encode() + second
    writer.close()
    answer, reader, writer = await run.ask(f"CONNECT {allowed} HTTP/1.1\r\n\r\n".encode() + second)
    assert answer.startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.readexactly(len(second)), WAIT) == second
    writer.close()
    assert [bytes(g) for g in stand.got] == [sent.encode() + second, second]
    assert run.told == []


async def test_a_flood_of_refusals_is_counted_but_told_and_logged_once_per_host(gate, stand, logs):
    """A run asking for host after host: every one refused and counted, the run's log and
    the runner's told of each host once, and of at most 32 hosts."""
    run = await _open(gate, _policy(stand))
    for n in [0, 0, 0, *range(1, 60)]:
        status, _ = await run.refused(
            f"CONNECT h{n}.evil.example.org:443 HTTP/1.1\r\n\r\n".encode()
        )
        assert status == b"HTTP/1.1 403 Forbidden"
    assert gate.describe() == "egress gate: 62 requests refused since start"
    assert len(run.told) == 33 and "h0.evil.example.org:443" in run.told[0]
    assert run.told[-1] == (
        "jetdbt egress gate: more than 32 hosts refused: the others are refused and counted"
    )
    assert len([e for e in logs if e["event"] == "egress_refused"]) == 32
    assert [e["told"] for e in logs if e["event"] == "egress_refused_many"] == [32]

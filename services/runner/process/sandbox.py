"""What a forked dbt child does to contain itself before it runs any project code.

A dbt project is code (Jinja with run_query, Python models, DuckDB's file functions), so
each invocation gets a world of its own, built from Linux namespaces right after the
warm fork (nothing is exec'd: the child keeps dbt's imports):

- a PID namespace: the child is PID 1 of a namespace holding only what it starts, and a
  /proc that shows only those; everything in it dies when it does;
- a mount namespace whose root is a fresh tmpfs holding the system (/usr, /etc, ...), the
  Python and jetdbt code read-only, the job folder (and a DuckDB warehouse's folder)
  writable, a private /tmp and a minimal /dev: nothing else of the machine, so
  JETDBT_HOME's access files, other jobs, bundles and the servers' data are not there;
- a network namespace with only loopback, and routes out through a relay (a process left
  outside that opens each connection and hands the socket in), each listening inside at an
  address and port: a networked warehouse's own (its host name mapped to a loopback address
  of its own, its IP address added to loopback), so the profile is dbt's as written, and
  the egress gate's (services/runner/egress/gate.py), the proxy every HTTP(S) client is
  pointed at, which decides what leaves (`dbt deps` alone, which fetches packages, keeps the
  machine's network: spec `host_network`; a project's env cannot steer its git or hub
  client, descriptor.py);
- its own uid (the runner's sandbox uid when the runner is root, else a user namespace),
  no capabilities and no_new_privs, so nothing it execs regains any.

Only the standard library: this module runs in the fork server's children.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import platform
import select
import signal
import socket
import stat
import struct
import sys
import threading

__all__ = ["enter", "fail", "SETUP_FAILED", "SETUP_MARK"]

# The exit code and the first words of the line a child prints when it cannot build its
# sandbox: the runner reports that line, never a project's failure.
SETUP_FAILED = 125
SETUP_MARK = "jetdbt sandbox:"

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _SIOCSIFADDR, _IFF_UP = 0x8913, 0x8914, 0x8916, 0x1
# The system the child sees, read-only: the rest of the machine is simply not there.
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_CAP_LAST = 63

_libc = ctypes.CDLL(None, use_errno=True)


class SetupFailed(OSError):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SetupFailed(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = ""):
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or ''} on {target}",
    )


def _bind(source: str, target: str, *, writable: bool) -> None:
    """Bind `source` at `target`; read-only (and nosuid) unless `writable`."""
    _mount(source, target, None, _MS_BIND | _MS_REC)
    flags = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | (0 if writable else _MS_RDONLY)
    _mount(None, target, None, flags)


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def enter(spec: dict, keep: list[int]) -> None:
    """Contain this process as `spec` says; returns in the contained child (this process
    becomes its keeper, which waits and exits with the child's status). `keep` are the
    descriptors the child needs (its output and events pipes); the relay closes them."""
    for procs in spec.get("cgroups", ()):
        with open(procs, "w") as fh:  # before anything is forked: all of it counted
            fh.write(str(os.getpid()))
    routes = spec.get("routes", ())
    own_network = not spec.get("host_network")
    uid, gid = os.geteuid(), os.getegid()
    drop_to = spec.get("uid") if uid == 0 else None
    relay = _start_relay(routes, keep, drop_to) if routes else None
    flags = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
    if own_network:
        flags |= _CLONE_NEWNET
    if uid != 0:
        flags |= _CLONE_NEWUSER
    _unshare(flags)
    if uid != 0:
        _map_user(uid, gid)
    alive_r, alive_w = os.pipe()  # the keeper holds the write end while it lives
    child = os.fork()
    if child:
        os.close(alive_r)
        if relay is not None:
            relay.close()
        _keep(child)
    os.close(alive_w)
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _build_root(spec)
    if own_network:
        _loopback_up()
    if relay is not None:
        lock = threading.Lock()  # one request on the channel at a time
        for index, (address, port) in enumerate(_local_addresses(routes)):
            _listen(relay, lock, index, address, port)
    if drop_to is not None:
        _own([spec["root"], *spec.get("writable", ())], drop_to)
    _drop(drop_to)
    _die_with_keeper(alive_r)


def _die_with_keeper(alive: int) -> None:
    """A uid change clears the parent-death signal: set again, then make sure the keeper did
    not die before it was (the pipe it holds would read as ended)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if select.select([alive], [], [], 0)[0]:
        os._exit(1)
    os.close(alive)


def _keep(child: int) -> None:
    """The keeper: wait for the contained child, then end as it ended."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _map_user(uid: int, gid: int) -> None:
    """An unprivileged runner: the child is root of its own user namespace, mapped to the
    runner's uid, so it may build its mounts; capabilities are dropped after."""
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"0 {gid} 1")


def _mkdirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def _own(places: list[str], uid: int) -> None:
    """The child's uid owns what it may write: the job's tree, a warehouse folder's files."""
    root, *folders = places
    for folder, _, files in os.walk(root):
        os.lchown(folder, uid, uid)
        for name in files:
            os.lchown(os.path.join(folder, name), uid, uid)
    for folder in folders:
        os.lchown(folder, uid, uid)
        for entry in os.scandir(folder):
            os.lchown(entry.path, uid, uid)


def _build_root(spec: dict) -> None:
    """A new root on a tmpfs holding only what the child may see, then pivot into it."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Opened before anything is hidden: a job under /tmp is still reachable to bind.
    shown = [
        (p, os.open(p, os.O_PATH), False) for p in spec.get("readonly", ()) if os.path.exists(p)
    ]
    shown += [(p, os.open(p, os.O_PATH), True) for p in [spec["root"], *spec.get("writable", ())]]
    new = "/tmp"
    _mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=16m")
    for place in ("/tmp", "/proc"):
        _mkdirs(new + place)
    # The child's own /tmp first: a job folder under the host's /tmp is bound inside it.
    _mount("tmpfs", new + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777,size=256m")
    for name in _SYSTEM:
        host = f"/{name}"
        if os.path.islink(host):
            os.symlink(os.readlink(host), new + host)
        elif os.path.isdir(host):
            _mkdirs(new + host)
            _bind(host, new + host, writable=False)
    # Parents before what lies inside them; a hidden place (JETDBT_HOME) inside a shown
    # folder (a DuckDB warehouse's) is an empty tmpfs there, the job bound in it after.
    places = [(p, fd, writable) for p, fd, writable in shown]
    places += [(h, None, False) for h in spec.get("hide", ()) if _inside_any(h, shown)]
    for path, fd, writable in sorted(places, key=lambda place: place[0].split("/")):
        if fd is None:
            _mkdirs(new + path)
            _mount("tmpfs", new + path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
            continue
        if not writable and any(path == f"/{s}" or path.startswith(f"/{s}/") for s in _SYSTEM):
            os.close(fd)
            continue  # already there with the system
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            _mkdirs(new + path)
        else:  # a single file (a socket): bound onto an empty file
            _mkdirs(os.path.dirname(new + path))
            open(new + path, "w").close()  # noqa: SIM115 - a mount point
        _bind(f"/proc/self/fd/{fd}", new + path, writable=writable)
        os.close(fd)
    _make_dev(new)
    _mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mkdirs(new + "/.old")
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupFailed(0, f"pivot_root: unknown on {platform.machine()}")
    _check(_libc.syscall(number, new.encode(), (new + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", _MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _inside_any(path: str, shown: list) -> bool:
    return any(path.startswith(folder.rstrip("/") + "/") for folder, _, _ in shown)


def _make_dev(new: str) -> None:
    """A /dev of the few devices a process needs, each bound from the host's."""
    dev = new + "/dev"
    _mkdirs(dev)
    _mount("tmpfs", dev, "tmpfs", _MS_NOSUID, "mode=0755,size=64k")
    for name in _DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{dev}/{name}", "w").close()  # noqa: SIM115 - a mount point
            _mount(f"/dev/{name}", f"{dev}/{name}", None, _MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{dev}/{name}")
    _mkdirs(dev + "/shm")
    _mount("tmpfs", dev + "/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777,size=64m")


def _loopback_up() -> None:
    """The namespace's loopback starts down; up, so the child may talk to itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, req + b"\0" * 22)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP) + b"\0" * 22)


def _local_addresses(routes: list[dict]) -> list[tuple[str, int]]:
    """Where each route listens inside so that its host reaches it: a host name gets a
    loopback address of its own in the child's /etc/hosts (`localhost` keeps 127.0.0.1);
    another IPv4 address is added to its loopback."""
    names = {}
    for route in routes:
        host = route["host"]
        if host != "localhost" and not _is_address(host):
            names.setdefault(host, f"127.0.1.{len(names) + 1}")
    if names or any(route["host"] == "localhost" for route in routes):
        lines = ["127.0.0.1 localhost", "::1 localhost", *(f"{a} {n}" for n, a in names.items())]
        with open("/tmp/.jetdbt-hosts", "w") as fh:
            fh.write("\n".join(lines) + "\n")
        _mount("/tmp/.jetdbt-hosts", "/etc/hosts", None, _MS_BIND)
    added = 0
    places = []
    for route in routes:
        host = route["host"]
        if host == "localhost":
            places.append(("127.0.0.1", route["port"]))
            continue
        if host in names:
            places.append((names[host], route["port"]))
            continue
        address = ipaddress.ip_address(host)
        if address.version == 4 and not address.is_loopback:
            added += 1
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                addr = struct.pack("HH4s8x", socket.AF_INET, 0, address.packed)
                fcntl.ioctl(s, _SIOCSIFADDR, struct.pack("16s", f"lo:{added}".encode()) + addr)
        places.append((str(address), route["port"]))
    return places


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _drop(uid: int | None) -> None:
    """No way back: no capabilities in any set, no privilege from anything exec'd."""
    for cap in range(_CAP_LAST + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    else:
        # Root of its own user namespace: its capabilities there go with an empty capset.
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    # A uid change makes a process non-dumpable: its own /proc/self (environ, status) would
    # be root's. Alone in its PID namespace, nothing but its own children can see it.
    _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


def _start_relay(routes: list[dict], keep: list[int], uid: int | None) -> socket.socket:
    """Fork, before the network is unshared, the one process that may open a connection:
    for each route, to its warehouse host and port or to the egress gate's socket (`to`),
    each handed into the sandbox as a descriptor. Returns the sandbox's end of the channel."""
    inside, outside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid:
        outside.close()
        return inside
    code = 0
    try:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        inside.close()
        for fd in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # Resolved once, before the uid is dropped (a lookup may import what it cannot read).
        targets = [_target(route["to"]) for route in routes]
        keeper = os.getppid()
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by the uid change
        if os.getppid() != keeper:
            os._exit(1)
        while asked := outside.recv(16):
            index = int.from_bytes(asked[1:3], "big")
            conn = _connect(targets[index]) if index < len(targets) else None
            if conn is None:
                outside.send(b"e")
                continue
            with conn:
                socket.send_fds(outside, [b"k"], [conn.fileno()])
    except BaseException:  # noqa: BLE001 - the relay ends; the sandbox's connects fail
        code = 1
    os._exit(code)


def _target(to) -> list:
    """A route's addresses: a warehouse's host and port resolved, or the gate's socket."""
    if isinstance(to, str):
        return [(socket.AF_UNIX, socket.SOCK_STREAM, 0, "", to)]
    return socket.getaddrinfo(to[0], int(to[1]), 0, socket.SOCK_STREAM)


def _connect(addresses: list) -> socket.socket | None:
    """A connection to the first of `addresses` that answers, or None."""
    for family, kind, proto, _, address in addresses:
        conn = socket.socket(family, kind, proto)
        conn.settimeout(30)
        try:
            conn.connect(address)
        except OSError:
            conn.close()
            continue
        conn.settimeout(None)
        return conn
    return None


def _listen(channel: socket.socket, lock: threading.Lock, index: int, address: str, port: int):
    """Inside: accept on `address`:`port`, and join each connection to one the relay opened
    for route `index`."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server = socket.create_server((address, port), family=family)

    def serve() -> None:
        while True:
            client, _ = server.accept()
            with lock:
                channel.send(b"c" + index.to_bytes(2, "big"))
                _, fds, _, _ = socket.recv_fds(channel, 16, 1)
            if not fds:
                client.close()
                continue
            remote = socket.socket(fileno=fds[0])
            for a, b in ((client, remote), (remote, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, name="jetdbt-warehouse-relay", daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def fail(exc: BaseException) -> None:
    """Say why the sandbox could not be built, and end with SETUP_FAILED."""
    print(f"{SETUP_MARK} {exc}", file=sys.stderr, flush=True)
    os._exit(SETUP_FAILED)


if __name__ == "__main__":  # the runner's check: build the sandbox read from stdin, then end
    try:
        enter(__import__("json").loads(sys.stdin.read()), [])
    except Exception as exc:  # noqa: BLE001 - said, with SETUP_FAILED
        fail(exc)
    os._exit(0)

"""The NATS connection every service shares: version gate, publishing, blobs, last-by-subject."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import msgspec
import nats
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.bus import contract as contract_mod
from jetdbt.shared.bus import events, subjects
from jetdbt.shared.bus.outages import TRANSIENT
from jetdbt.shared.bus.streams import BLOBS, EVENTS
from jetdbt.shared.identity import principals
from jetdbt.shared.process import logging as jlog
from nats.js.errors import (
    APIError,
    BadObjectMetaError,
    DigestMismatchError,
    InvalidObjectNameError,
    LinkIsABucketError,
    NotFoundError,
    ObjectDeletedError,
    ObjectNotFoundError,
)

__all__ = [
    "Bus",
    "ServerRefused",
    "ConnectionLost",
    "PublishFailed",
    "TRANSIENT",
    "check_server",
    "connect",
    "REQUIRED",
    "inbox_prefix",
    "url_user",
    "shown",
]

REQUIRED = (2, 10)
CLOSED_CHECK_SECONDS = 1.0  # how soon a service notices a connection closed without a word
# How long a starting service waits for a cluster electing leaders before it gives up.
START_PATIENCE_SECONDS = 60
# How long an event publish is retried: the event stream's duplicate window (from the
# contract), so a retry of a publish that did land is still dropped as the duplicate it is.
PUBLISH_RETRY_SECONDS = contract_mod.load().streams[EVENTS].duplicate_window_seconds
# The server's 503s that are a stream's answer, not its absence: insufficient resources,
# and a store that failed (a stream at its byte or message limit says so this way).
STORE_REFUSED = (10023, 10077)


def url_user(url: str) -> str | None:
    """The NATS user a server URL logs in as (`nats://runner:secret@host`), if it names one."""
    first = url.split(",")[0].strip()
    return urlsplit(first).username if "://" in first else None


def shown(url: str) -> str:
    """`url` as a log line or an error may show it: a password in it becomes `***`."""
    return re.sub(r"(://[^:/@,]*):[^@/,]*@", r"\1:***@", url)


async def _until_stored(what: str, once, retry_for: float):
    """Call `once` until the server stores what it writes: a NATS outage or a stream's
    leader election holds the caller (so writes stay in order) instead of losing the write."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_for
    delay = 0.1
    while True:
        try:
            return await once()
        except TRANSIENT as exc:
            if getattr(exc, "err_code", None) in STORE_REFUSED:
                raise  # the stream is full: waiting changes nothing
            if loop.time() + delay > deadline:
                raise PublishFailed(
                    f"{what} was not stored within {retry_for:.0f}s: {exc.__class__.__name__}"
                ) from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


def inbox_prefix(user: str | None) -> str:
    """Where a NATS user's replies arrive: a prefix of its own, so no other user may read
    them (each user's permissions allow subscribing to its own prefix only)."""
    return f"_INBOX_{user}" if user else "_INBOX"


class PublishFailed(RuntimeError):
    """An event could not be stored within the duplicate window (never a run timeout)."""


class Raced(RuntimeError):
    """Another event landed on the subject after the one a guarded publish expected."""


# The server's answer to a publish whose expected last subject sequence is not the last.
WRONG_LAST_SEQUENCE = 10071


class BlobUnreadable(ValueError):
    """A blob an event names is gone, too large or not what its digest says: the event is
    bad input (a projection dead-letters it), never a bug."""


# What the object store says of a name that is no object it can give whole.
_BROKEN = (
    BadObjectMetaError,
    DigestMismatchError,
    InvalidObjectNameError,
    LinkIsABucketError,
    ObjectDeletedError,
)


class ServerRefused(RuntimeError):
    """The NATS server cannot serve jetdbt (too old, or JetStream off)."""


def check_server(version: str, url: str) -> None:
    """Refuse a server older than REQUIRED, naming its version."""
    parts = version.split("-")[0].split(".")
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise ServerRefused(
            f"NATS server at {url} reports an unreadable version {version!r}"
        ) from None
    if have < REQUIRED:
        raise ServerRefused(
            f"NATS server at {url} is version {version}; jetdbt requires NATS >= "
            f"{REQUIRED[0]}.{REQUIRED[1]} with JetStream (multiple filter subjects arrived in 2.10)"
        )


class ConnectionLost(RuntimeError):
    """A connection that does not reconnect forever (the CLI's) is gone for good."""


class Bus:
    """One NATS connection with its JetStream context."""

    def __init__(self, nc, url: str):
        self.nc = nc
        self.js = nc.jetstream()
        self.url = url
        self._blobs = None
        self._buckets: dict[str, object] = {}
        # A runner sets its masking functions: no secret leaves in an event or a log line
        # (a line is masked with the one before it, where a spelling may begin).
        self.mask: Callable[[bytes], bytes] | None = None
        self.mask_line: Callable[[str, str], str] | None = None
        self._reopen: Callable[[], Awaitable] | None = None
        self._closing = False
        self._reviving = False
        self._watcher: asyncio.Task | None = None
        self._away_since: float | None = None
        self._unanswered_since: float | None = None
        self._gone = asyncio.Event()  # set when a connection without `_reopen` closes

    async def round_trip(self, deadline: float) -> bool:
        """Whether JetStream answers a request within `deadline` seconds now: a server that
        is stopped (SIGSTOP) keeps its socket open, so the connection's state says nothing.
        A failure starts the clock `unanswered_for` reads; an answer stops it."""
        try:
            await asyncio.wait_for(self.js.account_info(), deadline)
        except Exception:  # noqa: BLE001 - any failure to answer is the answer
            if self._unanswered_since is None:
                self._unanswered_since = time.monotonic()
            return False
        self._unanswered_since = None
        return True

    def unanswered_for(self) -> float:
        """Seconds since round trips began to fail; 0 while they are answered."""
        since = self._unanswered_since
        return 0.0 if since is None else time.monotonic() - since

    def away_for(self) -> float:
        """Seconds since the connection to NATS was lost; 0 while connected."""
        return 0.0 if self._away_since is None else time.monotonic() - self._away_since

    async def until_gone(self, waiting: Awaitable):
        """`waiting`'s result, or ConnectionLost once this connection is closed for good
        (its reconnects spent): a command line waiting on events never hangs on a stack
        that went away or came back on another address."""
        waited = asyncio.ensure_future(waiting)
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({waited, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if waited.done():
            return waited.result()
        waited.cancel()
        raise ConnectionLost(
            f"the connection to NATS at {self.url} was lost and did not come back (did"
            " the stack stop or restart?); what was sent before stays stored: `jetdbt"
            " status` and the API say what became of it"
        )

    def _lost(self) -> None:
        if self._away_since is None:
            self._away_since = time.monotonic()

    async def _on_closed(self) -> None:
        """The server closed the connection for good (a protocol error it would not
        forgive): a service opens a new one rather than serve on a dead one."""
        if self._closing or self._reviving:
            return
        self._lost()
        if self._reopen is None:  # the CLI's: what waits on it ends (until_gone)
            self._gone.set()
            return
        self._reviving = True
        asyncio.get_running_loop().create_task(self._revive())

    async def _watch_closed(self) -> None:
        """nats-py may close a connection without calling its closed callback (a server
        error racing the end of the socket): a closed connection is noticed here too."""
        while not self._closing:
            await asyncio.sleep(CLOSED_CHECK_SECONDS)
            if self.nc.is_closed:
                await self._on_closed()

    async def _revive(self) -> None:
        try:
            await self._reopen_until_open()
        finally:
            self._reviving = False

    async def _reopen_until_open(self) -> None:
        delay = 0.5
        while not self._closing:
            try:
                nc = await self._reopen()
            except Exception as exc:  # noqa: BLE001 - NATS away: try again
                jlog.get("nats", url=self.url).warning("nats_reopen_failed", error=repr(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.nc, self.js, self._blobs, self._buckets = nc, nc.jetstream(), None, {}
            self._away_since = None
            jlog.get("nats", url=self.url).warning("nats_connection_reopened")
            return

    def _masked(self, data: bytes) -> bytes:
        return self.mask(data) if self.mask is not None else data

    async def publish_line(self, subject: str, line: str, previous: str = "") -> None:
        """A human-readable log line (core NATS, no ack: a lost line costs no result),
        `previous` the line published before it on `subject`, as it was before masking."""
        masked = self.mask_line(line, previous) if self.mask_line is not None else line
        await self.nc.publish(subject, masked.encode())

    async def publish(
        self,
        event: events.Event,
        *,
        retry_for: float = PUBLISH_RETRY_SECONDS,
        after: int | None = None,
    ):
        """Publish an event with its deterministic id until the stream acknowledges it.

        A NATS outage holds the caller (so events stay in order) instead of losing the
        event; retries carry the same id, so one that did land is dropped as a duplicate.
        `after`: the stream sequence of the subject's last event the caller read (0: none);
        when another landed since, nothing is stored and Raced is raised.
        """
        subject, data = event.subject(), self._masked(events.encode(event))
        headers = {"Nats-Msg-Id": event.event_id()}
        if after is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(after)

        async def once():
            try:
                ack = await self.js.publish(subject, data, stream=EVENTS, headers=headers)
            except APIError as exc:
                if exc.err_code == WRONG_LAST_SEQUENCE:
                    raise Raced(f"{subject} moved on before {event.event_id()}") from None
                raise
            if ack.duplicate and await self._taken_by_declared_write(ack, subject):
                # An external system's declared write took this fact's id first (any
                # publisher chooses its message id): the fact is stored under one of
                # its own, never dropped.
                taken = {"Nats-Msg-Id": f"{event.event_id()}:{secrets.token_hex(8)}"}
                ack = await self.js.publish(subject, data, stream=EVENTS, headers=taken)
            return ack

        return await _until_stored(f"event {event.event_id()} on {subject}", once, retry_for)

    async def _taken_by_declared_write(self, ack, subject: str) -> bool:
        """Whether the message kept under a duplicate's id is a declared write (the one kind of
        event others than the runners publish) while `subject` is not one."""
        if subjects.is_declared_write(subject):
            return False
        try:
            kept = await self.js.get_msg(ack.stream, ack.seq)
        except NotFoundError:
            return False
        return subjects.is_declared_write(kept.subject)

    async def publish_command(
        self, verb: str, project: str, command, key: str, *, principal: str, token_id: str = ""
    ):
        """Publish a command (a msgspec Struct) on its principal's subject. Its message id,
        `cmd:<verb>:<project>:<key>`, makes a repeated publish a duplicate the stream drops.
        The API names the token it checked (`token_id`) on the API's own subject: the runner
        checks that token again and records that door."""
        subject = subjects.command(verb, project, principal, via_api=bool(token_id))
        data = msgspec.json.encode(command)
        headers = {"Nats-Msg-Id": f"cmd:{verb}:{project}:{key}"}
        if token_id:
            headers[principals.TOKEN_HEADER] = token_id
        ack = await self.js.publish(subject, data, headers=headers)
        if ack.duplicate and not await self._stored_as(ack, subject, data):
            # Any publisher chooses its message's id: one that sent ours first (another
            # principal's message under our command's id) must not make ours vanish.
            headers["Nats-Msg-Id"] += f":{secrets.token_hex(8)}"
            ack = await self.js.publish(subject, data, headers=headers)
        return ack

    async def _stored_as(self, ack, subject: str, data: bytes) -> bool:
        """Whether the message the stream kept for a duplicate's id is this very command."""
        try:
            kept = await self.js.get_msg(ack.stream, ack.seq)
        except NotFoundError:
            return False
        return kept.subject == subject and kept.data == data

    async def follow(self, pattern: str, cb):
        """Events on `pattern` from now on, as the log stores them, through an ordered
        consumer delivering to this user's inbox. Never a plain subscription to a fact or
        command subject: that would be interest a push consumer of another stream could
        deliver to, and the stream on the subject would store what it delivered."""
        from nats.js import api

        return await self.js.subscribe(
            pattern,
            stream=EVENTS,
            cb=cb,
            ordered_consumer=True,
            config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW, mem_storage=True),
            inactive_threshold=30,
        )

    async def bucket(self, name: str):
        """The key-value bucket `name`, looked up once per connection (a lookup is a
        round trip; the API reads the identity bucket on every request)."""
        if name not in self._buckets:
            self._buckets[name] = await self.js.key_value(name)
        return self._buckets[name]

    async def _store(self):
        if self._blobs is None:
            self._blobs = await self.js.object_store(BLOBS)
        return self._blobs

    async def put_blob(self, data: bytes, *, retry_for: float = PUBLISH_RETRY_SECONDS) -> str:
        """Store a blob under its content digest (a no-op when it is there already);
        masked first, like everything a runner publishes, and named by what is stored.
        Like an event, a blob waits out an outage or a leader election (a put of the same
        digest again is harmless)."""
        data = self._masked(data)
        digest = digest_of(data)

        async def once():
            store = await self._store()
            try:
                await store.get_info(digest)
            except ObjectNotFoundError:
                await store.put(digest, data)

        await _until_stored(f"blob {digest}", once, retry_for)
        return digest

    async def get_blob(self, digest: str, limit: int | None = None) -> bytes:
        """Fetch a blob and prove it is what its name says; BlobUnreadable, before reading
        it, when it is larger than `limit` bytes, and when the store cannot give it whole (a
        name an event made up, a broken object). ObjectNotFoundError when there is none."""
        store = await self._store()
        try:
            if limit is not None and (size := (await store.get_info(digest)).size) > limit:
                raise BlobUnreadable(f"blob {digest} is {size} bytes, over the {limit}-byte limit")
            data = (await store.get(digest)).data
        except _BROKEN as exc:
            raise BlobUnreadable(f"blob {digest!r} cannot be read: {exc!r}") from None
        if digest_of(data) != digest:
            raise BlobUnreadable(f"blob {digest} failed its digest check")
        return data

    async def last_event(self, subject: str) -> events.Event | None:
        """The newest event on one subject, read from the stream (never from a projection)."""
        found = await self.last_stored(subject)
        return found[0] if found is not None else None

    async def last_stored(self, subject: str) -> tuple[events.Event, int] | None:
        """The newest event on one subject and its stream sequence (None: none there)."""
        try:
            msg = await self.js.get_last_msg(EVENTS, subject)
        except NotFoundError:
            return None
        event = self._fact(msg, subject)
        return None if event is None else (event, msg.seq)

    async def event_at(self, seq: int) -> events.Event | None:
        """The event stored at stream sequence `seq` (None: none there, or not a fact of its
        subject), read from the stream."""
        try:
            msg = await self.js.get_msg(EVENTS, seq)
        except NotFoundError:
            return None
        return self._fact(msg, msg.subject)

    def _fact(self, msg, subject: str) -> events.Event | None:
        try:
            event = events.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # Not a fact anyone may write there (NATS accounts keep it so): as absent.
            jlog.get("bus").warning("last_event_unreadable", subject=subject, error=str(exc))
            return None
        if not events.fits(event, msg.subject):
            jlog.get("bus").warning("last_event_off_its_subject", subject=msg.subject)
            return None
        return event

    async def run_end(self, project: str, run_id: str) -> events.Event | None:
        """The run's final event (one of events.RUN_ENDS), read from the log; None while
        the run is open."""
        for kind in events.RUN_END_KINDS:
            final = await self.last_event(subjects.run_event(project, run_id, kind))
            if final is not None:
                return final
        return None

    async def close(self) -> None:
        """Flush what was published without an ack (log lines), then close.

        Callers stop their consumers first, so there is nothing left to drain.
        """
        self._closing = True
        if self._watcher is not None:
            self._watcher.cancel()
        if self.nc.is_closed:
            return
        with contextlib.suppress(Exception):
            await self.nc.flush(timeout=5)
        await self.nc.close()


async def _patiently(step, patient: bool, log, retried: tuple = TRANSIENT) -> None:
    """`step()`, tried again while it raises one of `retried` (the server does not answer
    in time) for up to START_PATIENCE_SECONDS when `patient` (a service): a cluster that
    just lost a node elects its leaders meanwhile, and a service starting then waits
    instead of exiting. The CLI (not patient) fails fast."""
    deadline = asyncio.get_running_loop().time() + START_PATIENCE_SECONDS
    while True:
        try:
            return await step()
        except retried as exc:
            if not patient or asyncio.get_running_loop().time() > deadline:
                raise
            log.warning("server_not_answered", error=repr(exc), retrying_in="1s")
            await asyncio.sleep(1)


async def connect(
    url: str,
    name: str,
    *,
    ensure: bool = True,
    apply: bool = True,
    forever: bool = False,
    consumer_overrides: dict | None = None,
    replicas: int = 1,
    user: str | None = None,
    password: str | None = None,
) -> Bus:
    """Connect as `user` (none: a server without authorization), refuse an unfit server,
    and, with `ensure`, apply the stream contract (`apply`, an operator's step) or only
    check it (services whose NATS user may not change streams or consumers), every stream
    at `replicas` (JETDBT_STREAM_REPLICAS) or more.

    Services reconnect forever (`forever=True`); the CLI fails fast instead.
    """
    servers = [u.strip() for u in url.split(",") if u.strip()]  # a cluster: a,b,c
    log = jlog.get("nats", url=shown(url))

    async def on_error(exc: Exception) -> None:
        log.warning("nats_error", error=f"{exc.__class__.__name__}: {exc}")

    bus: list[Bus] = []  # the callbacks reach the Bus made from this connection

    async def on_disconnected() -> None:
        if bus:
            bus[0]._lost()

    async def on_reconnected() -> None:
        if bus:
            bus[0]._away_since = None

    async def on_closed() -> None:
        if bus:
            await bus[0]._on_closed()

    async def reopen():
        return await nats.connect(
            servers,
            name=name,
            max_reconnect_attempts=-1 if forever else 3,
            connect_timeout=5,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            closed_cb=on_closed,
            allow_reconnect=True,
            user=user,
            password=password,
            inbox_prefix=inbox_prefix(user or url_user(url)),
        )

    nc = await reopen()
    try:
        check_server(nc.connected_server_version._server_version, shown(url))
        js = nc.jetstream()
        try:
            # Only a timeout is waited out: a server without JetStream says so at once.
            await _patiently(js.account_info, forever, log, (nats.errors.TimeoutError,))
        except Exception as exc:
            raise ServerRefused(
                f"NATS server at {shown(url)} (version"
                f" {nc.connected_server_version._server_version})"
                f" has no JetStream: start it with -js ({exc.__class__.__name__})"
            ) from None
        if ensure and apply:
            await _patiently(
                lambda: contract_mod.ensure(js, contract_mod.load(), consumer_overrides, replicas),
                forever,
                log,
            )
        elif ensure:
            await _patiently(
                lambda: contract_mod.check(js, contract_mod.load(), replicas), forever, log
            )
    except BaseException:
        await nc.close()
        raise
    bus.append(Bus(nc, shown(url)))
    if forever:
        bus[0]._reopen = reopen
        bus[0]._watcher = asyncio.get_running_loop().create_task(bus[0]._watch_closed())
    return bus[0]

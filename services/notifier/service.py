"""The notifier's loop: read run starts and ends from its durable consumer, deliver to
each hook of the run's project (and of its job) that listens, then ack. It also answers
hook requests (services/notifier/control.py). A notifier that dies mid-delivery gets the
run event again and delivers it again under the same delivery id: a receiver dedupes by
`X-Jetdbt-Delivery`.

One team's receiver never holds up another's: each project's events are read in their
order in a lane of the project's own, and each hook posts its deliveries in that order in
a turn of its own (another hook, of any project, does not wait for it). A hook whose
receiver hangs or fails (each attempt waits out its timeout, then backs off) keeps at most
HOOK_BACKLOG deliveries waiting behind the one it tries; a delivery past that is given up
at once, a dead letter naming why, so the events a stuck hook holds unacked never fill the
consumer's max_ack_pending for every team.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib

import msgspec
from jetdbt.services.notifier import control, hook_store
from jetdbt.services.notifier.body import body
from jetdbt.services.notifier.deliver import Poster, deliver, give_up
from jetdbt.shared.blobs.event_blobs import resolved
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.streams import EVENTS
from jetdbt.shared.jobs import webhooks
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from jetdbt.shared.process.config import Settings
from jetdbt.shared.runs import run_status

__all__ = ["Notifier", "CONSUMER", "event_of"]

CONSUMER = "notifier"
BATCH = 16
# A held event is told "in progress" this often, well within the consumer's ack wait (60 s),
# so one waiting in its lane behind a slow delivery is not delivered a second time.
BEAT_SECONDS = 15.0
# Deliveries of one hook that may wait behind the one it tries; past it one is given up.
HOOK_BACKLOG = 16


def event_of(event: ev.Event) -> str | None:
    """What a hook hears of a fact: start (a run's first attempt), success, failure (any
    other end: failed, cancelled); else None."""
    if isinstance(event, ev.RunStarted) and event.attempt == 1:
        return "start"
    if isinstance(event, ev.RunFinished):
        return "success" if event.result.status == run_status.PASSED else "failure"
    return None


class Notifier:
    def __init__(self, bus, settings: Settings, api_url: str = ""):
        self.bus, self.settings = bus, settings
        # The links' base: JETDBT_PUBLIC_URL, else where this stack's API listens.
        self.base_url = (
            settings.public_url or api_url or f"http://{settings.api_host}:{settings.api_port}"
        )
        self.log = jlog.get("notifier")
        # Each hook's (project, name) turn: its last delivery's end, and how many wait
        # (the one it tries among them); new at each start, every earlier task gone.
        self._turns: dict[tuple[str, str], asyncio.Future] = {}
        self._waiting: dict[tuple[str, str], int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        await supervise.forever(self._run_once, stop, self.log, "notifier_failed")

    async def _on_request(self, msg) -> None:
        reply = await control.answer(self.bus, self.settings, msg.subject, msg.data)
        if reply.error:
            self.log.info("hook_refused", subject=msg.subject, reason=reply.error)
        await msg.respond(msgspec.json.encode(reply))

    async def _run_once(self, stop: asyncio.Event) -> None:
        requests = await self.bus.nc.subscribe(
            f"{subjects.HOOK_CONTROL}.*", queue=CONSUMER, cb=self._on_request
        )
        sub = await self.bus.js.pull_subscribe_bind(CONSUMER, stream=EVENTS)
        self._turns, self._waiting = {}, {}
        lanes: dict[str, asyncio.Future] = {}  # each project's last event: read (its turns taken)
        held: set[asyncio.Task] = set()  # every event's task not done yet
        try:
            async with Poster(self.settings.webhook_hosts) as poster:
                while not stop.is_set():
                    try:
                        msgs = await sub.fetch(BATCH, timeout=0.5)
                    except TimeoutError:
                        continue
                    for msg in msgs:
                        project = subjects.subject_key(msg.subject)
                        read = asyncio.get_running_loop().create_future()
                        task = asyncio.create_task(
                            self._in_lane(lanes.get(project), read, poster, msg)
                        )
                        lanes[project] = read
                        held.add(task)
                        task.add_done_callback(held.discard)
                    for project in [p for p, f in lanes.items() if f.done()]:
                        del lanes[project]
        finally:
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await requests.unsubscribe()

    async def _in_lane(self, before, read: asyncio.Future, poster: Poster, msg) -> None:
        """Read one event after its project's previous one (`before`), take each listening
        hook's turn, then, `read` told, wait for the deliveries and ack; an event that fails
        here is left unacked, so the consumer gives it again."""
        beat = asyncio.create_task(self._beat(msg))
        try:
            try:
                if before is not None:
                    await asyncio.wait([before])
                sending = await self._notify(poster, msg)
            finally:
                if not read.done():
                    read.set_result(None)
            await asyncio.gather(*sending)
            await msg.ack()
        except Exception:
            self.log.exception("notify_failed", subject=msg.subject)
        finally:
            beat.cancel()

    async def _beat(self, msg) -> None:
        while True:
            await asyncio.sleep(BEAT_SECONDS)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    async def _notify(self, poster: Poster, msg) -> list[asyncio.Task]:
        """The deliveries one event makes, each in its hook's turn (taken here, in order)."""
        try:
            event = ev.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return []  # the projectors' dead letters keep a poison event; nobody is told of it
        name = event_of(event) if ev.fits(event, msg.subject) else None
        if name is None:
            return []
        hooks = await hook_store.of_project(self.bus, event.project)
        requested = None
        if hooks:
            requested = await self.bus.last_event(
                subjects.run_event(event.project, event.run_id, "requested")
            )
        job = getattr(requested, "job", "")
        listening = [
            h for h in hooks if webhooks.wanted(h.on, name) and (not h.job or h.job == job)
        ]
        if not listening:
            return []
        if isinstance(event, ev.RunFinished):
            event = await resolved(self.bus, event)
        return [self._turn(poster, msg, h, name, event, requested) for h in listening]

    def _turn(self, poster: Poster, msg, hook, name: str, event, requested) -> asyncio.Task:
        """Take `hook`'s next turn for this delivery (no await: in the lane's order), or give
        the delivery up when HOOK_BACKLOG wait already."""
        delivery = hashlib.sha256(
            f"{hook.project}:{hook.name}:{hook.revision}:{event.run_id}:{name}".encode()
        ).hexdigest()[:32]
        key = (hook.project, hook.name)
        waiting = self._waiting.get(key, 0)
        if waiting > HOOK_BACKLOG:
            return asyncio.create_task(give_up(self.bus, hook, delivery, event.run_id, name))
        before, done = self._turns.get(key), asyncio.get_running_loop().create_future()
        self._turns[key], self._waiting[key] = done, waiting + 1
        send = functools.partial(self._one, poster, msg, hook, delivery, name, event, requested)
        return asyncio.create_task(self._in_turn(key, before, done, send))

    async def _in_turn(self, key, before, done: asyncio.Future, send) -> None:
        try:
            if before is not None:
                await asyncio.wait([before])
            await send()
        finally:
            done.set_result(None)
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key], self._turns[key]

    async def _one(self, poster: Poster, msg, hook, delivery: str, name: str, event, requested):
        sent = body(
            delivery_id=delivery, hook=hook.name, event_name=name, run=event,
            requested=requested, base_url=self.base_url,
        )  # fmt: skip
        await deliver(
            self.bus, poster, hook, sent, delivery, event.run_id, name,
            self.settings.webhook_attempts, self.settings.webhook_retry_seconds,
            keep_alive=msg.in_progress,
        )  # fmt: skip

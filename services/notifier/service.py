"""The notifier's loop: read run starts and ends from its durable consumer, deliver to
each hook of the run's project (and of its job) that listens, then ack. It also answers
hook requests (services/notifier/control.py). A notifier that dies mid-delivery gets the
run event again and delivers it again under the same delivery id: a receiver dedupes by
`X-Jetdbt-Delivery`.

Each project's events are delivered in their order, in a lane of its own: a project whose
receiver hangs or fails (each attempt waits out its timeout, then backs off) holds up its
own hooks alone, never another project's (another team's)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import msgspec

from services.notifier import control, hook_store
from services.notifier.body import body
from services.notifier.deliver import Poster, deliver
from shared import events as ev
from shared import logging as jlog
from shared import subjects, supervise, webhooks
from shared.bus import EVENTS
from shared.config import Settings
from shared.event_blobs import resolved

__all__ = ["Notifier", "CONSUMER", "event_of"]

CONSUMER = "notifier"
BATCH = 16
# A held event is told "in progress" this often, well within the consumer's ack wait (60 s),
# so one waiting in its lane behind a slow delivery is not delivered a second time.
BEAT_SECONDS = 15.0


def event_of(event: ev.Event) -> str | None:
    """What a hook hears of a fact: start (a run's first attempt), success, failure (any
    other end: failed, cancelled); else None."""
    if isinstance(event, ev.RunStarted) and event.attempt == 1:
        return "start"
    if isinstance(event, ev.RunFinished):
        return "success" if event.result.status == "passed" else "failure"
    return None


class Notifier:
    def __init__(self, bus, settings: Settings, api_url: str = ""):
        self.bus, self.settings = bus, settings
        # The links' base: JETDBT_PUBLIC_URL, else where this stack's API listens.
        self.base_url = (
            settings.public_url or api_url or f"http://{settings.api_host}:{settings.api_port}"
        )
        self.log = jlog.get("notifier")

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
        lanes: dict[str, asyncio.Task] = {}  # each project's last event's task
        held: set[asyncio.Task] = set()  # every event's task not done yet
        try:
            async with Poster(self.settings.webhook_hosts) as poster:
                while not stop.is_set():
                    try:
                        msgs = await sub.fetch(BATCH, timeout=0.5)
                    except TimeoutError:
                        continue
                    for msg in msgs:
                        project = msg.subject.split(".")[3]
                        task = asyncio.create_task(self._in_lane(lanes.get(project), poster, msg))
                        lanes[project] = task
                        held.add(task)
                        task.add_done_callback(held.discard)
                    for project in [p for p, t in lanes.items() if t.done()]:
                        del lanes[project]
        finally:
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await requests.unsubscribe()

    async def _in_lane(self, before: asyncio.Task | None, poster: Poster, msg) -> None:
        """Deliver one event after its project's previous one, then ack it; an event that
        fails here is left unacked, so the consumer gives it again."""
        beat = asyncio.create_task(self._beat(msg))
        try:
            if before is not None:
                await asyncio.wait([before])
            await self._notify(poster, msg)
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

    async def _notify(self, poster: Poster, msg) -> None:
        try:
            event = ev.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # the projectors' dead letters keep a poison event; nobody is told of it
        name = event_of(event) if ev.fits(event, msg.subject) else None
        if name is None:
            return
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
            return
        if isinstance(event, ev.RunFinished):
            event = await resolved(self.bus, event)
        await asyncio.gather(
            *(self._one(poster, msg, h, name, event, requested) for h in listening)
        )

    async def _one(self, poster: Poster, msg, hook, name: str, event, requested) -> None:
        delivery = hashlib.sha256(
            f"{hook.project}:{hook.name}:{hook.revision}:{event.run_id}:{name}".encode()
        ).hexdigest()[:32]
        sent = body(
            delivery_id=delivery, hook=hook.name, event_name=name, run=event,
            requested=requested, base_url=self.base_url,
        )  # fmt: skip
        await deliver(
            self.bus, poster, hook, sent, delivery, event.run_id, name,
            self.settings.webhook_attempts, self.settings.webhook_retry_seconds,
            keep_alive=msg.in_progress,
        )  # fmt: skip

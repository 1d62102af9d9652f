"""Adding and removing hooks: requests on `dbt.hookctl.<project>`, answered once.

A request, not a command on the commands stream: it carries the hook's secret, which no
stream may keep. The door that sent it (the API, which checked the token's role on the
project; or the operator's CLI) is what NATS accounts vouch for. The notifier checks the
hook, keeps it with its secret in its bucket, and records `hook.saved` without the secret.
"""

from __future__ import annotations

import uuid

import msgspec
from jetdbt.services.notifier import hook_store
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus import subjects
from jetdbt.shared.jobs import webhooks
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import Settings

__all__ = ["answer"]

_log = jlog.get("notifier")


async def answer(bus, settings: Settings, subject: str, data: bytes) -> webhooks.HookReply:
    """Do one request; the reply names what was saved, or why nothing was."""
    try:
        project = subjects.hook_control_project(subject)
        request = msgspec.json.decode(data, type=webhooks.HookRequest)
        subjects.check_project(project)
        subjects.check_hook_name(request.name)
        if request.action == "remove":
            return await _remove(bus, project, request)
        return await _add(bus, settings, project, request)
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        return webhooks.HookReply(error=str(exc))


async def _add(bus, settings: Settings, project: str, request) -> webhooks.HookReply:
    url = webhooks.check_url(request.url, settings.webhook_hosts)
    on = webhooks.check_events(request.on)
    if request.job:
        subjects.check_job_name(request.job)
    secret = webhooks.check_secret(request.secret) if request.secret else webhooks.new_secret()
    others = [h for h in await hook_store.of_project(bus, project) if h.name != request.name]
    if len(others) >= webhooks.MAX_HOOKS:
        raise webhooks.BadHook(
            f"project {project!r} has {len(others)} hooks, the most a project may have:"
            f" remove one first (jetdbt hook remove NAME --project {project})"
        )
    revision = uuid.uuid4().hex
    stored = hook_store.StoredHook(
        project=project, name=request.name, url=url, on=on, job=request.job,
        secret=secret, revision=revision,
    )  # fmt: skip
    await hook_store.put(bus, stored)
    await bus.publish(
        ev.HookSaved(
            project=project,
            name=request.name,
            url=url,
            on=on,
            job=request.job,
            saved_by=request.principal,
            revision=revision,
        )  # fmt: skip
    )
    _log.info("hook_saved", project=project, hook=request.name, on=on)
    return webhooks.HookReply(name=request.name, url=url, on=on, job=request.job, secret=secret)


async def _remove(bus, project: str, request) -> webhooks.HookReply:
    if not await hook_store.remove(bus, project, request.name):
        return webhooks.HookReply(error=f"project {project!r} has no hook {request.name!r}")
    await bus.publish(
        ev.HookRemoved(
            project=project,
            name=request.name,
            removed_by=request.principal,
            revision=uuid.uuid4().hex,
        )  # fmt: skip
    )
    return webhooks.HookReply(name=request.name)

"""Where hooks and their secrets live: the key-value bucket DBT_HOOK_SECRETS, which only
the notifier's user (and the operator) may read (services/access/nats_users.py). The log
has each hook's facts without its secret; this bucket has what delivering needs."""

from __future__ import annotations

import msgspec
from jetdbt.shared.bus import kv_keys, subjects
from jetdbt.shared.bus.streams import HOOK_SECRETS
from nats.js.errors import KeyNotFoundError

__all__ = ["StoredHook", "put", "remove", "of_project", "key_of"]


class StoredHook(msgspec.Struct, frozen=True, kw_only=True):
    project: str
    name: str
    url: str
    on: list[str]
    job: str = ""
    secret: str
    revision: str


def key_of(project: str, name: str) -> str:
    return f"{subjects.token(project)}.{subjects.token(name)}"


async def put(bus, hook: StoredHook) -> None:
    kv = await bus.bucket(HOOK_SECRETS)
    await kv.put(key_of(hook.project, hook.name), msgspec.json.encode(hook))


async def remove(bus, project: str, name: str) -> bool:
    """Forget a hook; False when there was none."""
    kv = await bus.bucket(HOOK_SECRETS)
    try:
        await kv.get(key_of(project, name))
    except KeyNotFoundError:
        return False
    await kv.purge(key_of(project, name))
    return True


async def of_project(bus, project: str) -> list[StoredHook]:
    kv = await bus.bucket(HOOK_SECRETS)
    found = []
    for key in await kv_keys.keys(bus, HOOK_SECRETS, f"{subjects.token(project)}."):
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            continue
        if entry.value:
            found.append(msgspec.json.decode(entry.value, type=StoredHook))
    return found

"""A bucket's keys as the hooks' limit, the tokens, the projector roles and retention read
them (shared/bus/kv_keys.py), against a real nats-server: every key under its prefix and none
of a longer prefix's, read right by many readers at once, where nats-py's watcher could
say "none"."""

from __future__ import annotations

import asyncio

import pytest
from jetdbt.services.notifier import hook_store
from jetdbt.shared.bus import kv_keys
from jetdbt.shared.bus.connection import connect
from jetdbt.shared.bus.streams import HOOK_SECRETS


def _hook(project: str, name: str) -> hook_store.StoredHook:
    return hook_store.StoredHook(
        project=project, name=name, url="https://hooks.example.com/x", on=["end"],
        secret="s" * 32, revision=name,
    )  # fmt: skip


async def test_every_key_of_a_prefix_is_read_by_many_readers_at_once(nats_url):
    bus = await connect(nats_url, "test")
    try:
        for n in range(25):
            await hook_store.put(bus, _hook("shop", f"h{n}"))
        await hook_store.put(bus, _hook("shops", "other"))  # a longer prefix, not shop's
        assert await hook_store.remove(bus, "shop", "h3")

        listed = await kv_keys.keys(bus, HOOK_SECRETS, "shop.")
        assert listed == sorted(f"shop.h{n}" for n in range(25))  # the removed one's marker too
        expected = sorted(f"h{n}" for n in range(25) if n != 3)
        seen = await asyncio.gather(*(hook_store.of_project(bus, "shop") for _ in range(40)))
        assert all(sorted(h.name for h in hooks) == expected for hooks in seen)
        assert await kv_keys.keys(bus, HOOK_SECRETS, "nobody.") == []
        with pytest.raises(ValueError, match="ends with a dot"):
            await kv_keys.keys(bus, HOOK_SECRETS, "shop")  # would read as no key at all
    finally:
        await bus.close()

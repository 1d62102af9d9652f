"""Ensure the JetStream contract in streams.yaml: create, update compatibly, or refuse."""

from __future__ import annotations

import asyncio
import time
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import CONTRACT
from nats.js import api
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError

__all__ = [
    "Contract",
    "IncompatibleContract",
    "load",
    "ensure",
    "check",
    "consumer_overrides",
    "replicas_wanted",
    "fewer_replicas",
]

DAY = 86400.0
_log = jlog.get("contract")


class SourceSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Another stream's messages under `subjects_from`, stored here as `subjects_to`."""

    stream: str
    subjects_from: str
    subjects_to: str


class StreamSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    subjects: list[str]
    description: str = ""
    retention: str = "limits"
    storage: str = "file"
    max_age_days: float = 0
    duplicate_window_seconds: float = 120
    deny_delete: bool = False
    deny_purge: bool = False
    replicas: int = 1
    max_bytes: int = -1  # -1: no byte limit
    max_msg_size: int = -1
    max_msgs_per_subject: int = -1
    allow_msg_schedules: bool = False
    sources: list[SourceSpec] = []


class ConsumerSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    stream: str
    filter_subjects: list[str]
    ack_wait_seconds: float = 30
    max_ack_pending: int = 1000
    max_deliver: int = -1
    # Where a new consumer starts: `all` the stream's history, `new` only what comes after
    # its creation (the notifier: a stack that gains it tells no hook of past runs).
    deliver: Literal["all", "new"] = "all"


class BucketSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    description: str = ""
    storage: str = "file"
    history: int = 1
    ttl_seconds: float = 0  # 0: keys never expire


class Contract(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    streams: dict[str, StreamSpec]
    consumers: dict[str, ConsumerSpec]
    projections: dict[str, list[str]]
    object_stores: dict[str, BucketSpec]
    key_value: dict[str, BucketSpec]


class IncompatibleContract(RuntimeError):
    """The server holds a stream whose config cannot be changed into the declared one."""


def load(path: Path = CONTRACT) -> Contract:
    return msgspec.convert(yaml.safe_load(path.read_text()), Contract)


def _stream_config(name: str, spec: StreamSpec) -> api.StreamConfig:
    return api.StreamConfig(
        name=name,
        description=spec.description or None,
        subjects=spec.subjects,
        retention=api.RetentionPolicy(spec.retention),
        storage=api.StorageType(spec.storage),
        max_age=spec.max_age_days * DAY,
        duplicate_window=spec.duplicate_window_seconds,
        deny_delete=spec.deny_delete,
        deny_purge=spec.deny_purge,
        num_replicas=spec.replicas,
        max_bytes=spec.max_bytes,
        max_msg_size=spec.max_msg_size,
        max_msgs_per_subject=spec.max_msgs_per_subject,
        sources=[
            api.StreamSource(
                name=source.stream,
                subject_transforms=[
                    api.SubjectTransform(src=source.subjects_from, dest=source.subjects_to)
                ],
            )
            for source in spec.sources
        ]
        or None,
        # Not in _CHECKED: a server before 2.12 does not know it, and keeps jetdbt running.
        allow_msg_schedules=spec.allow_msg_schedules or None,
    )


# Fields the server cannot change in place; deny_* and message schedules only switch on.
_FIXED = ("storage", "retention")
_ONE_WAY = ("deny_delete", "deny_purge", "allow_msg_schedules")


def _plain(value):
    """nats-py hands back enums it created and plain strings it decoded."""
    return value.value if isinstance(value, Enum) else value


def _check_compatible(name: str, have: api.StreamConfig, want: api.StreamConfig) -> None:
    for field in _FIXED:
        server, declared = _plain(getattr(have, field)), _plain(getattr(want, field))
        if server != declared:
            raise IncompatibleContract(
                f"stream {name}: field '{field}' is {server!r} on the server and {declared!r}"
                " in streams.yaml; it cannot change in place (migrate the stream by hand)"
            )
    for field in _ONE_WAY:
        if getattr(have, field) and not getattr(want, field):
            raise IncompatibleContract(
                f"stream {name}: field '{field}' is on and cannot be switched off (migrate"
                " the stream by hand)"
            )


def replicas_wanted(declared: int, configured: int, held: int | None = None) -> int:
    """The replicas of a stream or bucket: the most of streams.yaml's, JETDBT_STREAM_REPLICAS
    and what the server holds (an operator who scaled one up keeps it: never shrink)."""
    return max(declared, configured, held or 1)


def fewer_replicas(held: dict[str, int], configured: int) -> dict[str, int]:
    """The streams (buckets' too) the server holds at fewer replicas than configured."""
    return {name: count for name, count in held.items() if count < configured}


async def _ensure_stream(js, name: str, spec: StreamSpec, replicas: int) -> None:
    want = _stream_config(name, spec)
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        want.num_replicas = replicas_wanted(spec.replicas, replicas)
        await js.add_stream(want)
        return
    _check_compatible(name, info.config, want)
    want.num_replicas = replicas_wanted(spec.replicas, replicas, info.config.num_replicas)
    await js.update_stream(want)


async def _raise_replicas(js, stream: str, replicas: int, ttl: float | None = None) -> None:
    """A bucket's backing stream at `replicas` or more and, for a key-value bucket, its TTL
    (a bucket made before its TTL was declared, whose leases never expired, gets it)."""
    config = (await js.stream_info(stream)).config
    wanted = replicas_wanted(1, replicas, config.num_replicas)
    if (config.num_replicas or 1) == wanted and (ttl is None or (config.max_age or 0) == ttl):
        return
    config.num_replicas = wanted
    config.max_age = config.max_age if ttl is None else ttl
    await js.update_stream(config)


def consumer_overrides(settings) -> dict:
    """The consumer settings a deployment tunes (RUN_ACK_WAIT_SECONDS), as `ensure` takes
    them: whoever applies the contract (`jetdbt up`, `jetdbt contract apply`) sets them."""
    return {"runners": {"ack_wait": settings.run_ack_wait_seconds}}


# Settings an operator tunes per deployment; whoever created the consumer chose them.
_TUNED = ("ack_wait", "max_ack_pending")


async def _ensure_consumer(js, name: str, spec: ConsumerSpec, overrides: dict[str, Any]) -> None:
    """Create a missing consumer; never rewrite a live one.

    Every service ensures the contract at start, so a service whose settings differ
    (an API started without RUN_ACK_WAIT_SECONDS) would otherwise undo the
    operator's choice for all runners. It says so and the live value stands.
    """
    config = api.ConsumerConfig(
        durable_name=name,
        filter_subjects=spec.filter_subjects,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=overrides.get("ack_wait", spec.ack_wait_seconds),
        max_ack_pending=overrides.get("max_ack_pending", spec.max_ack_pending),
        max_deliver=spec.max_deliver,
        deliver_policy=api.DeliverPolicy.ALL if spec.deliver == "all" else api.DeliverPolicy.NEW,
    )
    try:
        live = (await js.consumer_info(spec.stream, name)).config
    except NotFoundError:
        await js.add_consumer(spec.stream, config)
        return
    filters = live.filter_subjects or ([live.filter_subject] if live.filter_subject else [])
    if sorted(filters) != sorted(spec.filter_subjects):
        raise IncompatibleContract(
            f"consumer {name}: field 'filter_subjects' is {live.filter_subjects!r} on the"
            f" server and {spec.filter_subjects!r} in streams.yaml (an operator re-applies it)"
        )
    for field in _TUNED:
        have, want = getattr(live, field), getattr(config, field)
        if have != want:
            _log.warning(
                "consumer_setting_differs", consumer=name, field=field, live=have, here=want
            )


# The server's answers to more replicas than it can place: it is not part of a cluster; no
# `replicas` nodes can each hold one (too few, or a new cluster's nodes still meeting).
_NOT_CLUSTERED = 10074
_NO_PEERS = 10005
# How long a placement is asked again while a new cluster's nodes learn of each other.
PLACEMENT_SECONDS = 30.0


async def ensure(
    js, contract: Contract, consumer_overrides: dict | None = None, replicas: int = 1
) -> None:
    """Make the server match the contract, every stream and bucket at `replicas` or more
    (JETDBT_STREAM_REPLICAS); idempotent, safe to run from every service."""
    deadline = time.monotonic() + PLACEMENT_SECONDS
    while True:
        try:
            return await _ensure(js, contract, consumer_overrides or {}, replicas)
        except APIError as exc:
            if exc.err_code == _NO_PEERS and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                continue
            if exc.err_code not in (_NOT_CLUSTERED, _NO_PEERS):
                raise
            raise IncompatibleContract(_unplaceable(replicas, exc.err_code)) from None


def _unplaceable(replicas: int, code: int) -> str:
    said = f"JETDBT_STREAM_REPLICAS (--replicas) is {replicas}, and "
    if code == _NOT_CLUSTERED:
        return said + (
            "this NATS server is not part of a cluster: a single server holds one replica of"
            f" each stream. Set it to 1, or name a cluster of {replicas} nodes or more in"
            " NATS_URL"
        )
    return said + (
        f"the NATS cluster has no {replicas} nodes that can each hold a replica (asked for"
        f" {PLACEMENT_SECONDS:g} s, while new nodes meet). Set it to the cluster's size or less"
    )


async def _ensure(js, contract: Contract, consumer_overrides: dict, replicas: int) -> None:
    for name, spec in contract.streams.items():
        await _ensure_stream(js, name, spec, replicas)
    for name, spec in contract.consumers.items():
        await _ensure_consumer(js, name, spec, consumer_overrides.get(name, {}))
    for name, spec in contract.object_stores.items():
        try:
            await js.object_store(name)
        except (BucketNotFoundError, NotFoundError):
            await js.create_object_store(
                name,
                config=api.ObjectStoreConfig(
                    description=spec.description or None,
                    storage=api.StorageType(spec.storage),
                    replicas=replicas,
                ),
            )
            continue
        await _raise_replicas(js, f"OBJ_{name}", replicas)
    for name, spec in contract.key_value.items():
        try:
            await js.key_value(name)
        except (BucketNotFoundError, NotFoundError):
            await js.create_key_value(
                api.KeyValueConfig(
                    bucket=name,
                    description=spec.description or None,
                    history=spec.history,
                    storage=api.StorageType(spec.storage),
                    ttl=spec.ttl_seconds or None,
                    replicas=replicas,
                )
            )
            continue
        await _raise_replicas(js, f"KV_{name}", replicas, spec.ttl_seconds)


# What `check` compares on a live stream: a service refuses a server whose stream differs
# from streams.yaml in any of these (a drifted max_age could erase the "forever" log).
_CHECKED = (
    "subjects",
    "storage",
    "retention",
    "max_age",
    "duplicate_window",
    "deny_delete",
    "deny_purge",
    "max_bytes",
    "max_msg_size",
)
_APPLY = "an operator applies streams.yaml: `jetdbt contract apply`"


def _comparable(field: str, value):
    value = _plain(value)
    if field == "subjects":
        return sorted(value or [])
    if field in ("max_age", "duplicate_window"):
        return round(float(value or 0), 3)
    if field in ("max_bytes", "max_msg_size"):
        return -1 if value in (None, 0) else value
    return value


async def _live(kind: str, name: str, lookup):
    """The server's config of a declared stream, consumer or bucket; refused when missing."""
    try:
        return (await lookup).config
    except (NotFoundError, BucketNotFoundError):
        missing = f"{kind} {name} does not exist on the server; {_APPLY}"
        raise IncompatibleContract(missing) from None


async def check(js, contract: Contract, replicas: int = 1) -> None:
    """Refuse a server whose streams, consumers and buckets are not the contract's, naming
    the first field that differs; changes nothing (a service's NATS user may not). Streams
    held at fewer than `replicas` (JETDBT_STREAM_REPLICAS) only make a warning: the service
    runs, with less of the log's safety than its operator asked for."""
    held = {}
    for name, spec in contract.streams.items():
        have = await _live("stream", name, js.stream_info(name))
        held[name] = have.num_replicas or 1
        want = _stream_config(name, spec)
        for field in _CHECKED:
            server = _comparable(field, getattr(have, field))
            declared = _comparable(field, getattr(want, field))
            if server != declared:
                raise IncompatibleContract(
                    f"stream {name}: field '{field}' is {server!r} on the server and"
                    f" {declared!r} in streams.yaml; {_APPLY}"
                )
    for name, spec in contract.consumers.items():
        live = await _live("consumer", name, js.consumer_info(spec.stream, name))
        filters = live.filter_subjects or ([live.filter_subject] if live.filter_subject else [])
        if sorted(filters) != sorted(spec.filter_subjects):
            raise IncompatibleContract(
                f"consumer {name}: field 'filter_subjects' is {filters!r} on the server and"
                f" {spec.filter_subjects!r} in streams.yaml; {_APPLY}"
            )
    for name in contract.object_stores:
        config = await _live("object store", name, js.stream_info(f"OBJ_{name}"))
        held[f"OBJ_{name}"] = config.num_replicas or 1
    for name, spec in contract.key_value.items():
        config = await _live("bucket", name, js.stream_info(f"KV_{name}"))
        if (config.max_age or 0) != spec.ttl_seconds:
            raise IncompatibleContract(
                f"bucket {name}: field 'ttl_seconds' is {config.max_age or 0} on the server and"
                f" {spec.ttl_seconds} in streams.yaml; {_APPLY}"
            )
        held[f"KV_{name}"] = config.num_replicas or 1
    fewer = fewer_replicas(held, replicas)
    if fewer:
        _log.warning(
            "streams_under_replicated",
            streams=fewer,
            configured=replicas,
            setting="JETDBT_STREAM_REPLICAS",
            fix=f"an operator applies `jetdbt contract apply --replicas {replicas}`",
        )

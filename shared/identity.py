"""Who may do what: principals, their team and grants, and API tokens, in the DBT_IDENTITY
bucket an operator writes and the API and runners read.

Keys are `principal.<subject token of the name>` and `token.<id>`. A token's secret is
never stored: only its sha256, compared in constant time.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from typing import Literal

import msgspec
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

from shared import subjects

__all__ = [
    "BUCKET",
    "DEFAULT_TEAM",
    "ROLES",
    "Grant",
    "Principal",
    "Token",
    "role_allows",
    "team_of",
]

BUCKET = "DBT_IDENTITY"
DEFAULT_TEAM = "default"
# Ordered: a role can do everything a role before it can.
ROLES = ("viewer", "runner", "deployer", "admin")
Role = Literal["viewer", "runner", "deployer", "admin"]


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """`role` on every project whose name matches the glob `project`."""

    role: Role
    project: str = "*"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    team: str = DEFAULT_TEAM
    kind: Literal["person", "system"] = "person"
    grants: list[Grant] = []


class Token(msgspec.Struct, frozen=True, kw_only=True):
    """An API bearer token: who it speaks for, with what role on which projects."""

    id: str
    principal: str
    team: str
    role: Role
    project: str = "*"
    sha256: str
    created_at: datetime
    expires_at: datetime | None = None


def role_allows(have: str, need: str) -> bool:
    """True when role `have` is at least role `need`."""
    return ROLES.index(have) >= ROLES.index(need)


def project_matches(pattern: str, project: str) -> bool:
    return fnmatch.fnmatchcase(project, pattern)


def principal_key(name: str) -> str:
    return f"principal.{subjects.token(name)}"


def token_key(token_id: str) -> str:
    return f"token.{token_id}"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(token: Token, secret: str) -> bool:
    return hmac.compare_digest(token.sha256, hash_secret(secret))


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def now() -> datetime:
    return datetime.now(UTC)


async def _bucket(bus):
    try:
        return await bus.js.key_value(BUCKET)
    except (BucketNotFoundError, NotFoundError):
        return None


async def load_principal(bus, name: str) -> Principal | None:
    """The principal's configuration, or None when it has none (or there is no bucket)."""
    kv = await _bucket(bus)
    if kv is None or not name:
        return None
    try:
        entry = await kv.get(principal_key(name))
    except (KeyNotFoundError, NotFoundError):
        return None
    if not entry.value:
        return None
    return msgspec.json.decode(entry.value, type=Principal)


async def team_of(bus, principal: str) -> str:
    """The principal's configured team; DEFAULT_TEAM when it has none."""
    found = await load_principal(bus, principal)
    return found.team if found is not None else DEFAULT_TEAM

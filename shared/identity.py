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
from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoKeysError, NotFoundError

from shared import subjects
from shared.quote import quote

__all__ = [
    "BUCKET",
    "DEFAULT_TEAM",
    "ROLES",
    "TOKEN_HEADER",
    "Grant",
    "Principal",
    "Token",
    "BadToken",
    "Caller",
    "caller_of",
    "claim_problem",
    "deploy_team",
    "IdentityError",
    "authenticate",
    "create_token",
    "list_tokens",
    "load_principal",
    "project_matches",
    "put_principal",
    "revoke_token",
    "role_allows",
    "team_of",
]

BUCKET = "DBT_IDENTITY"
# The header the API sets on a command it publishes: the id of the token it checked.
TOKEN_HEADER = "Jetdbt-Token-Id"
_PREFIX = "jdbt_"
_ID_CHARS = 12
DEFAULT_TEAM = "default"
# Ordered: a role can do everything a role before it can.
ROLES = ("viewer", "runner", "deployer", "admin")
Role = Literal["viewer", "runner", "deployer", "admin"]


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """`role` on every project whose name matches the glob `project`."""

    role: Role
    project: str = "*"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """A person or another system; a system publishes its commands as NATS user `nats_user`."""

    name: str
    team: str = DEFAULT_TEAM
    kind: Literal["person", "system"] = "person"
    grants: list[Grant] = []
    nats_user: str | None = None


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


class IdentityError(ValueError):
    """An identity request that cannot be done as asked; the message says why."""


class BadToken(IdentityError):
    """A bearer token that does not authenticate: malformed, unknown, revoked or expired."""


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
        return await bus.bucket(BUCKET)
    except (BucketNotFoundError, NotFoundError):
        return None


async def _get(kv, key: str, kind: type):
    if kv is None:
        return None
    try:
        entry = await kv.get(key)
    except (KeyNotFoundError, NotFoundError):
        return None
    if not entry.value:
        return None
    return msgspec.json.decode(entry.value, type=kind)


async def _writable(bus):
    kv = await _bucket(bus)
    if kv is None:
        raise IdentityError(f"the {BUCKET} bucket does not exist: apply the contract first")
    return kv


async def load_principal(bus, name: str) -> Principal | None:
    """The principal's configuration, or None when it has none (or there is no bucket)."""
    if not name:
        return None
    return await _get(await _bucket(bus), principal_key(name), Principal)


async def team_of(bus, principal: str) -> str:
    """The principal's configured team; DEFAULT_TEAM when it has none."""
    found = await load_principal(bus, principal)
    return found.team if found is not None else DEFAULT_TEAM


async def put_principal(bus, principal: Principal) -> None:
    """Write a principal's configuration (an operator's step: needs the admin NATS user)."""
    subjects.token(principal.name)  # a name no subject can carry is refused here
    kv = await _writable(bus)
    await kv.put(principal_key(principal.name), msgspec.json.encode(principal))


def _check_team(team: str) -> str:
    try:
        return subjects.check_project(team)
    except subjects.InvalidName:
        raise IdentityError(
            f"team {team!r} is invalid: use lowercase letters, digits, '_' and '-'"
        ) from None


async def create_token(
    bus,
    *,
    principal: str,
    team: str,
    role: str,
    project: str = "*",
    expires_in: timedelta | None = None,
) -> tuple[Token, str]:
    """A new token and its bearer string (shown once; only its hash is kept). The principal
    is recorded in `team` with the token's grant; a principal already in another team is
    refused rather than moved."""
    if role not in ROLES:
        raise IdentityError(f"role {role!r} is unknown; roles: {', '.join(ROLES)}")
    if not principal or not project:
        raise IdentityError("a token needs a principal and a project pattern")
    _check_team(team)
    known = await load_principal(bus, principal)
    if known is not None and known.team != team:
        raise IdentityError(
            f"principal {principal!r} is in team {known.team!r}, not {team!r}:"
            " a token cannot move a principal to another team"
        )
    grant = Grant(role=role, project=project)
    grants = list(known.grants) if known is not None else []
    if grant not in grants:
        grants.append(grant)
    base = known or Principal(name=principal, team=team)
    await put_principal(bus, msgspec.structs.replace(base, grants=grants))
    token_id, secret = secrets.token_hex(_ID_CHARS // 2), new_secret()
    created = now()
    token = Token(
        id=token_id,
        principal=principal,
        team=team,
        role=role,
        project=project,
        sha256=hash_secret(secret),
        created_at=created,
        expires_at=created + expires_in if expires_in else None,
    )
    kv = await _writable(bus)
    await kv.create(token_key(token_id), msgspec.json.encode(token))
    return token, f"{_PREFIX}{token_id}_{secret}"


async def list_tokens(bus) -> list[Token]:
    kv = await _bucket(bus)
    if kv is None:
        return []
    try:
        keys = await kv.keys()
    except NoKeysError:
        return []
    found = [await _get(kv, key, Token) for key in keys if key.startswith("token.")]
    return sorted((t for t in found if t is not None), key=lambda t: t.created_at)


async def revoke_token(bus, token_id: str) -> bool:
    """Delete a token; False when there is no such token."""
    kv = await _writable(bus)
    if await _get(kv, token_key(token_id), Token) is None:
        return False
    await kv.delete(token_key(token_id))
    return True


def _split(bearer: str) -> tuple[str, str]:
    if not bearer.startswith(_PREFIX):
        raise BadToken("the bearer token is malformed: jetdbt tokens start with 'jdbt_'")
    token_id, _, secret = bearer[len(_PREFIX) :].partition("_")
    if len(token_id) != _ID_CHARS or not all(c in "0123456789abcdef" for c in token_id):
        raise BadToken("the bearer token is malformed: its id is not 12 hex digits")
    if not secret:
        raise BadToken("the bearer token is malformed: it has no secret")
    if not secret.isascii() or not secret.isprintable():
        # A secret is URL-safe base64; a header's undecodable bytes must not reach hashing.
        raise BadToken("the bearer token is malformed: its secret is not URL-safe text")
    return token_id, secret


async def authenticate(bus, bearer: str) -> Token:
    """The token `bearer` names, checked now: it exists (not revoked), its secret's hash
    matches in constant time, and it has not expired. BadToken says which failed."""
    token_id, secret = _split(bearer)
    token = await _get(await _bucket(bus), token_key(token_id), Token)
    if token is None or not secret_matches(token, secret):
        raise BadToken(f"token {token_id} is unknown or revoked, or its secret is wrong")
    if token.expires_at is not None and token.expires_at <= now():
        raise BadToken(f"token {token_id} expired at {token.expires_at.isoformat()}")
    return token


async def _door(bus, principal: str, known: Principal | None, token_id: str | None) -> str:
    """How a command for `principal` came in: the API token it names when that token is
    the principal's, else NATS, as the system's user when the principal is one."""
    if token_id and len(token_id) == _ID_CHARS and token_id.isalnum():
        token = await _get(await _bucket(bus), token_key(token_id), Token)
        if token is not None and token.principal == principal:
            return f"api token {token_id}"
    if known is not None and known.nats_user:
        return f"nats user {known.nats_user}"
    return "nats operator"


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """Who published a command: the principal its subject names, that principal's team,
    and the door it came in by."""

    principal: str
    team: str
    door: str
    known: bool = False  # the principal has a configuration (else: the operator's own name)
    own_user: bool = False  # came in as the principal's own NATS user (no token checked it)


async def caller_of(bus, subject: str, headers: dict | None) -> Caller:
    """The authenticated caller of a command on `subject` (NATS permissions tie the
    principal token to its publisher). Raises subjects.InvalidName for a bad token."""
    principal = subjects.command_principal(subject)
    known = await load_principal(bus, principal)
    door = await _door(bus, principal, known, (headers or {}).get(TOKEN_HEADER))
    return Caller(
        principal=principal,
        team=known.team if known else DEFAULT_TEAM,
        door=door,
        known=known is not None,
        own_user=door.startswith("nats user "),
    )


def team_problem(caller: Caller, project: str, owner: str) -> str | None:
    """Why `caller` may not run or cancel in `project`, owned by team `owner` ("" before a
    team deployed it). A token was scoped by the API; a principal's own NATS user acts only
    within its team, as a token of that team would."""
    if not caller.own_user or not owner or owner == caller.team:
        return None
    return (
        f"project {project!r} belongs to team {owner!r}; principal {caller.principal!r}"
        f" is in team {caller.team!r} and may run or cancel only its own team's projects"
    )


def deploy_team(caller: Caller, project: str, owner: str) -> tuple[str, str | None]:
    """The team a deploy of `project` records, or why it is refused. A project belongs to
    its deployers' team (`owner`, "" before its first deploy by a configured principal): a
    configured principal of another team may not take it over; an unconfigured one (only
    an operator's NATS user can publish as one) keeps the owner."""
    if not caller.known:
        return owner, None
    if owner and owner != caller.team:
        return owner, (
            f"project {project!r} belongs to team {owner!r}; principal"
            f" {caller.principal!r} is in team {caller.team!r} and cannot deploy it"
        )
    return caller.team, None


def claim_problem(requested_by: str, principal: str) -> str | None:
    """Why a command's `requested_by` cannot stand beside its authenticated principal:
    the payload may repeat the principal, never name another."""
    if not requested_by or requested_by == principal:
        return None
    return (
        f"field 'requested_by' is {quote(requested_by)} but the command was published as"
        f" principal {quote(principal)}: a command speaks only for its own principal"
        " (leave requested_by out)"
    )

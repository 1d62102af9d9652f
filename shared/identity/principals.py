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
from jetdbt.shared.bus import kv_keys, subjects
from jetdbt.shared.bus.streams import IDENTITY
from jetdbt.shared.wording.short_quote import quote
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

__all__ = [
    "DEFAULT_TEAM",
    "ROLES",
    "TOKEN_HEADER",
    "Grant",
    "Principal",
    "Token",
    "BadToken",
    "Caller",
    "VERB_ROLES",
    "caller_of",
    "claim_problem",
    "command_problem",
    "scope_problem",
    "token_named",
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
    "least_role",
    "team_of",
    "project_team",
]

# The header the API sets on a command it publishes: the id of the token it checked.
TOKEN_HEADER = "Jetdbt-Token-Id"
_PREFIX = "jdbt_"
_ID_CHARS = 12
DEFAULT_TEAM = "default"
# Ordered: a role can do everything a role before it can.
ROLES = ("viewer", "runner", "deployer", "admin")
# The least role each command verb needs, on either door (run covers build, retry, parse).
VERB_ROLES = {
    "run": "runner",
    "cancel": "runner",
    "deploy": "deployer",
    "job": "runner",
    "promote": "deployer",
}
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
        return await bus.bucket(IDENTITY)
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
        raise IdentityError(f"the {IDENTITY} bucket does not exist: apply the contract first")
    return kv


async def load_principal(bus, name: str) -> Principal | None:
    """The principal's configuration, or None when it has none (or there is no bucket)."""
    if not name:
        return None
    return await _get(await _bucket(bus), principal_key(name), Principal)


async def project_team(bus, project: str) -> str:
    """The team a project belongs to: the one its deploys recorded ("" before the first)."""
    owner = await bus.last_event(subjects.deploy_event(project, "requested"))
    return getattr(owner, "team", "")


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
    found = [await _get(kv, key, Token) for key in await kv_keys.keys(bus, IDENTITY, "token.")]
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


async def token_named(bus, token_id: str | None) -> Token | None:
    """The token record `token_id` names, or None (malformed, unknown or revoked)."""
    if not token_id or len(token_id) != _ID_CHARS or not token_id.isalnum():
        return None
    return await _get(await _bucket(bus), token_key(token_id), Token)


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """Who published a command: the principal its subject names, that principal's team,
    and the door it came in by (what the server vouches for: the subject, under the
    permissions of the only users who may publish it)."""

    principal: str
    team: str
    door: str
    known: bool = False  # the principal has a configuration (else: the operator's own name)
    own_user: bool = False  # came in as the principal's own NATS user (no token checked it)
    grants: list[Grant] = []  # the principal's, for a system's own user
    via_api: bool = False  # on the API's own subject: the door is the token it names
    token: Token | None = None  # the API's command: the token it names, read again here
    token_id: str = ""  # what the API's command named, found or not


async def caller_of(bus, subject: str, headers: dict | None) -> Caller:
    """The authenticated caller of a command on `subject`. A token id is read only on the
    API's own subject (`subjects.via_api`): on any other, a header is anyone's to write and
    is ignored. Raises subjects.InvalidName for a bad token."""
    principal = subjects.command_principal(subject)
    known = await load_principal(bus, principal)
    team = known.team if known else DEFAULT_TEAM
    if subjects.via_api(subject):
        token_id = str((headers or {}).get(TOKEN_HEADER, ""))[:64]
        token = await token_named(bus, token_id)
        return Caller(
            principal=principal,
            team=token.team if token is not None else team,
            door=f"api token {subjects.filed_under(token_id)}" if token_id else "api",
            known=known is not None,
            via_api=True,
            token=token,
            token_id=token_id or "",
        )
    own = known is not None and bool(known.nats_user)
    return Caller(
        principal=principal,
        team=team,
        door=f"nats user {known.nats_user}" if own else "nats operator",
        known=known is not None,
        own_user=own,
        grants=list(known.grants) if own else [],
    )


def scope_problem(token: Token, project: str, team: str | None) -> str | None:
    """Why `token` may not act on `project`, whose team is `team` (None: no deploy named
    one): the one rule of both doors. An admin token acts on every project."""
    if token.role == "admin":
        return None
    if not project_matches(token.project, project):
        return f"token {token.id} covers projects matching {token.project!r}, not {project!r}"
    if team != token.team:
        return (
            f"project {project!r} is not a project of team {token.team!r}"
            " (a project's team is the team of its deployer)"
        )
    return None


def _token_problem(caller: Caller, verb: str, project: str, owner: str) -> str | None:
    token, need = caller.token, VERB_ROLES[verb]
    if token is None:
        return (
            f"the API's command names token {quote(caller.token_id)}, which is unknown or"
            " revoked: send it again with a valid token"
        )
    if token.principal != caller.principal:
        return (
            f"token {token.id} speaks for {quote(token.principal)}, not for the command's"
            f" principal {quote(caller.principal)}"
        )
    if token.expires_at is not None and token.expires_at <= now():
        return f"token {token.id} expired at {token.expires_at.isoformat()}"
    if not role_allows(token.role, need):
        return f"a {verb} command needs role {need!r}; token {token.id} has {token.role!r}"
    # A first deploy gives the project its deployer's team.
    return scope_problem(token, project, owner or (token.team if verb == "deploy" else None))


def _grant_problem(caller: Caller, verb: str, project: str, owner: str) -> str | None:
    need = VERB_ROLES[verb]
    if not any(
        role_allows(g.role, need) and project_matches(g.project, project) for g in caller.grants
    ):
        held = ", ".join(f"{g.role} on {g.project!r}" for g in caller.grants) or "none"
        return (
            f"a {verb} command needs role {need!r} on {project!r}; principal"
            f" {caller.principal!r} holds {held}"
        )
    if owner and owner != caller.team:
        return (
            f"project {project!r} belongs to team {owner!r}; principal {caller.principal!r}"
            f" is in team {caller.team!r} and may act only in its own team's projects"
        )
    return None


def command_problem(caller: Caller, verb: str, project: str, owner: str) -> str | None:
    """Why `caller` may not send a `verb` command for `project`, owned by team `owner`
    ("" before its first deploy), or None. The API's command is checked again here, as the
    API checked it (the token's principal, expiry, role, pattern and team); a system's own
    user by its grants and team; the operator's NATS user may do anything."""
    if verb not in VERB_ROLES:
        return None  # the worker refuses an unknown verb, naming it
    if caller.via_api:
        return _token_problem(caller, verb, project, owner)
    if caller.own_user:
        return _grant_problem(caller, verb, project, owner)
    return None


def run_role(caller: Caller, project: str) -> str:
    """The role `caller` runs `project` with, by the door it came in: the API token's role, a
    system's own user's highest grant on the project, the operator's NATS user admin."""
    if caller.via_api:
        return caller.token.role if caller.token is not None else "viewer"
    if caller.own_user:
        held = [g.role for g in caller.grants if project_matches(g.project, project)]
        return max(held, key=ROLES.index, default="viewer")
    return "admin"


def least_role(*roles: str) -> str:
    """The lowest of `roles`: a run others start for someone takes no more than each gave."""
    return min(roles, key=ROLES.index)


def environment_problem(role: str, environment: str, roles: list[str]) -> str | None:
    """Why a caller of `role` may not run in `environment`, which lets only `roles` run."""
    if role in roles:
        return None
    return (
        f"environment {environment!r} lets roles {', '.join(roles) or 'none'} run in it;"
        f" the caller's role on the project is {role!r}"
    )


def deploy_team(caller: Caller, project: str, owner: str) -> tuple[str, str | None]:
    """The team a deploy of `project` records, or why it is refused. A project belongs to
    its first deployer's team (`owner`, "" before its first deploy): a principal of another
    team may not take it over. The operator's own principal (configured nowhere) is in
    DEFAULT_TEAM, the same in deploys, runs and tokens, so its first deploy gives the project
    that team; a later deploy by the operator keeps the owner."""
    if not caller.known and caller.token is None:
        return owner or DEFAULT_TEAM, None
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

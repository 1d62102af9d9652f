"""The NATS accounts and users of a jetdbt stack, and what each may publish and read.

One user per role, so a fact carries the authority of who could publish it:
- `runner` alone publishes facts (run, node, state, retry, graph, deploy, relation) and
  log lines, and alone reads the contract's durable consumers (`runners`, `relation_watch`);
- `projector` only reads events (never the identity bucket), and alone writes
  DBT_PROJECTORS, where its processes take turns to fold;
- `api` reads, and publishes commands on behalf of the token it checked, on subjects only
  it may publish (`dbt.cmd.<verb>.<project>.<principal>.api`), and hook requests; it
  writes the object store (never purges it) for a deploy a token uploaded;
- `triggers` reads events (its own durable, `triggers`) and publishes only its runs'
  commands (`dbt.cmd.run.<project>.triggers`), from an account of its own;
- `notifier` reads run events through its own durable consumer, alone reads and writes
  the hooks' secrets (DBT_HOOK_SECRETS), answers hook requests and publishes only hook
  facts;
- `admin` (the operator and the CLI) may do anything: it applies streams.yaml;
- an external system may publish only the command verbs its role grants, under its own
  principal's subject, for its projects, and declared writes.
No service user may create, update, purge or delete a stream, nor create a durable
consumer or delete the contract's; each user reads replies under its own inbox prefix.

Accounts keep replies out of the log. A client names any reply subject it likes, and the
server's JetStream answers there unchecked: in one account, a publish with the reply
subject `dbt.evt.deploy.<project>.requested` stored the server's ack on that fact subject.
So the streams live in the account HOME with the runners and the operator only; the API,
the projectors and every external system each have an account of their own and reach
HOME through service imports of exactly their subjects. A reply to a service import
travels on a response subject the server makes (`_R_.…`) back into the requester's own
account, which holds no stream. A system's declared writes are imported into the intake
stream under its principal (`dbt.in.<principal>.relation.…`), where a runner checks them
before it records a fact.

`jetdbt up` generates the users with random passwords into JETDBT_HOME/access (0600) and
starts nats-server with the configuration rendered from them; deploy/nats holds the same
rules for a deployment.
"""

from __future__ import annotations

import json
import secrets
import signal
from pathlib import Path

from jetdbt.services.access.local import ADMIN, access_dir, users_file, write_private
from jetdbt.shared.bus import contract as contract_mod
from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.connection import inbox_prefix
from jetdbt.shared.bus.streams import (
    BLOBS,
    COMMANDS,
    EVENTS,
    HOOK_SECRETS,
    IDENTITY,
    LOGS,
    PROJECTORS,
    SCHEDULES_STREAM,
)
from jetdbt.shared.identity import principals
from jetdbt.shared.process.pid_files import signal_server

__all__ = [
    "SERVICE_USERS",
    "AccessError",
    "add_system",
    "conf_file",
    "ensure_users",
    "permissions",
    "reload_server",
    "account_of",
    "render_conf",
    "render_deploy_accounts",
    "render_deploy_system",
]

SERVICE_USERS = ("runner", "projector", "api", "triggers", "notifier")
HOME = "JETDBT"  # the account of the streams, the runners and the operator
SYSTEMS = "SYSTEMS"  # every external system's account (its users change; its imports never)
_RESERVED = (*SERVICE_USERS, ADMIN)
# A system runs (run, retry, parse, cancel) or deploys as well; it is never an admin.
SYSTEM_ROLES = ("runner", "deployer")


def _buckets() -> list[tuple[str, str]]:
    """(subject prefix, backing stream) of every bucket the runner writes: the contract's
    object stores and key-value buckets, the operator's identity bucket and the notifier's
    hook secrets aside."""
    spec = contract_mod.load()
    found = [(f"$O.{name}", f"OBJ_{name}") for name in spec.object_stores]
    found += [
        (f"$KV.{name}", f"KV_{name}")
        for name in spec.key_value
        if name not in (IDENTITY, HOOK_SECRETS)
    ]
    return found


# Reading: stream and consumer info, last message by subject, KV and object reads.
_READ = [
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.NAMES",
    "$JS.API.CONSUMER.INFO.*.*",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.>",
    # A blob is read, and a bucket watched, through an ordered consumer of its stream.
    *[f"$JS.API.CONSUMER.CREATE.{stream}{tail}" for _, stream in _buckets() for tail in ("", ".>")],
    # A run's log lines are read (kept, served) through a consumer of their own.
    f"$JS.API.CONSUMER.CREATE.{LOGS}",
    f"$JS.API.CONSUMER.CREATE.{LOGS}.>",
    f"$JS.API.CONSUMER.DELETE.{LOGS}.*",
    "$JS.FC.>",
]
# Reading the event log through consumers of one's own (projector checkpoints, the API's
# lag and event streams): created, fetched, acked and deleted by the reader. Created only
# on the subject without a name, where the server refuses a durable ("expected to be
# ephemeral"): an ephemeral consumer goes when its reader does, a durable would stay.
_READ_EVENTS = [
    f"$JS.API.CONSUMER.CREATE.{EVENTS}",
    f"$JS.API.CONSUMER.MSG.NEXT.{EVENTS}.*",
    f"$JS.ACK.{EVENTS}.>",
    f"$JS.API.CONSUMER.DELETE.{EVENTS}.*",
]
# Never a service's: streams change only by an operator applying streams.yaml.
_NEVER = [
    "$JS.API.STREAM.CREATE.>",
    "$JS.API.STREAM.UPDATE.>",
    "$JS.API.STREAM.DELETE.>",
    # The log and the commands are never purged (retention purges only run logs and blobs).
    f"$JS.API.STREAM.PURGE.{EVENTS}",
    f"$JS.API.STREAM.PURGE.{COMMANDS}",
    f"$JS.API.STREAM.PURGE.{SCHEDULES_STREAM}",
    f"$JS.API.STREAM.PURGE.KV_{IDENTITY}",
    "$JS.API.STREAM.MSG.DELETE.>",
    "$JS.API.STREAM.SNAPSHOT.>",
    "$JS.API.STREAM.RESTORE.>",
    "$JS.API.CONSUMER.DURABLE.CREATE.>",
    "$JS.API.CONSUMER.PAUSE.>",
    "$JS.API.CONSUMER.UNPIN.>",
    f"$JS.API.CONSUMER.CREATE.{COMMANDS}",
    f"$JS.API.CONSUMER.CREATE.{COMMANDS}.>",
    f"$JS.API.CONSUMER.DELETE.{COMMANDS}.>",
    # The identity bucket is the operator's.
    f"$KV.{IDENTITY}.>",
]
_FACTS = [
    subjects.ALL_EVENTS,
    # Jobs' message schedules (DBT_SCHEDULES): a runner stores each definition it checked.
    # No user publishes `dbt.fire.>`: only the server fires there.
    subjects.ALL_SCHEDULES,
    subjects.ALL_LOGS,
    *[f"{prefix}.>" for prefix, _ in _buckets() if prefix != f"$KV.{PROJECTORS}"],
    # Retention: a pruned run's log lines and objects (deleting an object purges its chunks).
    f"$JS.API.STREAM.PURGE.{LOGS}",
    *[
        f"$JS.API.STREAM.PURGE.{stream}"
        for prefix, stream in _buckets()
        if prefix.startswith("$O.")
    ],
]
# A deploy's bundle and upload record (shared/project/uploads.py), which the API stores for a token.
_BLOB_WRITES = f"$O.{BLOBS}.>"
# Which projector process folds and which stand by (projections/active.py): theirs alone.
_PROJECTOR_TURNS = f"$KV.{PROJECTORS}.>"
# The least role each command verb needs, on either door.
VERB_ROLES = principals.VERB_ROLES


class AccessError(ValueError):
    """An access change that cannot be made as asked; the message says why."""


# The service user that reads each of the contract's durables (the runner: every other).
_DURABLE_OWNERS = {"triggers": "triggers", "notifier": "notifier"}


def _durables() -> list[tuple[str, str]]:
    return [(spec.stream, name) for name, spec in contract_mod.load().consumers.items()]


def _owner(durable: str) -> str:
    return _DURABLE_OWNERS.get(durable, "runner")


def _durable_denials(user: str) -> list[str]:
    """Nobody creates or deletes the contract's durables; only their owner reads them."""
    denied = []
    for stream, name in _durables():
        denied += [
            f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
            f"$JS.API.CONSUMER.CREATE.{stream}.{name}.>",
            f"$JS.API.CONSUMER.DELETE.{stream}.{name}",
        ]
        if _owner(name) != user:
            denied += [f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.ACK.{stream}.{name}.>"]
    return denied


def _durable_reads(user: str) -> list[str]:
    found = []
    for stream, name in _durables():
        if _owner(name) == user:
            found += [f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.ACK.{stream}.{name}.>"]
    return found


def _system_commands(principal: str, projects: list[str], role: str) -> list[str]:
    """The command subjects a system may publish: its own principal's, for its projects, and
    only the verbs its role grants (a `runner` never deploys)."""
    verbs = [v for v in subjects.COMMAND_VERBS if principals.role_allows(role, VERB_ROLES[v])]
    found = []
    for verb in verbs:
        if "*" in projects:
            found.append(subjects.command_of_any_project(verb, principal))
        else:
            found += [subjects.command(verb, p, principal) for p in projects]
    return found


def permissions(name: str, user: dict) -> dict:
    """The nats-server permissions of one user of the users file, inside its account."""
    inbox = f"{inbox_prefix(name)}.>"
    if name == ADMIN:
        return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    if user.get("kind") == "system":
        return {
            "publish": {
                "allow": [
                    *_system_commands(user["principal"], user["projects"], _role(user)),
                    subjects.intake_writes(user["principal"]),
                ]
            },
            "subscribe": {"allow": [inbox]},
        }
    allow = {
        "runner": [*_READ, *_READ_EVENTS, *_FACTS, *_durable_reads("runner")],
        "projector": [*_READ, *_READ_EVENTS, _PROJECTOR_TURNS],
        "api": [
            *_READ,
            *_READ_EVENTS,
            subjects.API_COMMANDS,
            subjects.ALL_HOOK_CONTROL,
            _BLOB_WRITES,
        ],
        # It reads events and publishes its runs' commands, and nothing else.
        "triggers": [*_READ, *_READ_EVENTS, *_durable_reads("triggers"), subjects.TRIGGER_COMMANDS],
        "notifier": [
            *_READ,
            *_bucket_reads(f"KV_{HOOK_SECRETS}"),
            f"$KV.{HOOK_SECRETS}.>",
            subjects.family_pattern("hook"),
            *_durable_reads("notifier"),
        ],
    }[name]
    deny = [*_NEVER, *_durable_denials(name)]
    if name in ("projector", "triggers"):  # neither needs a principal or a token
        deny += _bucket_reads(f"KV_{IDENTITY}")
    if name != "notifier":  # the hooks' secrets are the notifier's alone
        deny += [*_bucket_reads(f"KV_{HOOK_SECRETS}"), f"$KV.{HOOK_SECRETS}.>"]
    if name != "projector":  # nobody else may make a projector active or look like one
        deny.append(_PROJECTOR_TURNS)
    subscribe = [inbox, subjects.ALL_HOOK_CONTROL] if name == "notifier" else [inbox]
    # Every user subscribes to its inbox only: no core interest on a fact or command subject
    # exists, so no push consumer can deliver there (runners follow cancels from the log).
    # The notifier also hears hook requests, and may answer each (on its reply subject only).
    granted = {"publish": {"allow": allow, "deny": deny}, "subscribe": {"allow": subscribe}}
    return granted | ({"allow_responses": True} if name == "notifier" else {})


def _role(user: dict) -> str:
    return user.get("role", "runner")


def account_of(name: str, user: dict) -> str:
    """The NATS account a user lives in: the runners and the operator beside the streams
    (HOME), the API, the projectors and triggers each in their own, external systems in
    SYSTEMS."""
    if user.get("kind") == "system":
        return SYSTEMS
    return {
        "runner": HOME,
        "notifier": HOME,
        ADMIN: HOME,
        "api": "API",
        "projector": "PROJECTOR",
        "triggers": "TRIGGERS",
    }[name]


# What the API and the projectors reach in HOME: the JetStream API (a pull request's
# messages are many responses to one request, hence `stream`), acks and flow control.
_JS_SERVICES = ["$JS.API.>", "$JS.ACK.>", "$JS.FC.>"]


def _imports(account: str) -> list[dict]:
    """What crosses from an account into HOME: services only (their replies come back on
    the server's own response subjects, never on a subject the requester named), and a
    service user's push deliveries (ordered consumers: blobs, watches, event streams).
    SYSTEMS imports every command and intake subject, and each system user's permissions
    allow its own only: a system added later changes users, which the server reloads,
    never imports, which it does not rewire for an account it did not start with."""
    if account == SYSTEMS:
        return [{"service": subjects.ALL_COMMANDS}, {"service": subjects.ALL_INTAKE}]
    name = {"API": "api", "PROJECTOR": "projector", "TRIGGERS": "triggers"}[account]
    found = [{"service": s} for s in _JS_SERVICES]
    if name == "api":
        found.append({"service": subjects.API_COMMANDS})
        found.append({"service": subjects.ALL_HOOK_CONTROL})
        found.append({"service": _BLOB_WRITES})
    if name == "triggers":
        found.append({"service": subjects.TRIGGER_COMMANDS})
    if name == "projector":
        found.append({"service": _PROJECTOR_TURNS})
    found.append({"stream": f"{inbox_prefix(name)}.>"})
    return found


def _exports() -> list[dict]:
    """HOME's exports: the JetStream API to the service accounts alone, commands to the
    API and the systems, the intake to the systems."""
    services = ("api", "projector", "triggers")  # the accounts outside HOME
    found = [
        {"service": s, "accounts": [account_of(u, {}) for u in services]}
        | ({"response_type": "stream"} if s == "$JS.API.>" else {})
        for s in _JS_SERVICES
    ]
    found += [
        {"service": subjects.ALL_COMMANDS, "accounts": ["API", "TRIGGERS", SYSTEMS]},
        {"service": subjects.ALL_INTAKE, "accounts": [SYSTEMS]},
        {"service": subjects.ALL_HOOK_CONTROL, "accounts": ["API"]},
        {"service": _BLOB_WRITES, "accounts": ["API"]},
        {"service": _PROJECTOR_TURNS, "accounts": ["PROJECTOR"]},
    ]
    found += [{"stream": f"{inbox_prefix(u)}.>", "accounts": [account_of(u, {})]} for u in services]
    return found


def _bucket_reads(stream: str) -> list[str]:
    """Every way to read a key-value bucket's backing stream."""
    return [
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
    ]


def _value(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(value)


def _entry(item: dict, imported: bool = False) -> str:
    """One export (`{service: "dbt.cmd.>", accounts: [...]}`) or import from HOME
    (`{service: {account: JETDBT, subject: ...}}`) on one line."""
    kind = "service" if "service" in item else "stream"
    subject = json.dumps(item[kind])
    source = f"{{account: {HOME}, subject: {subject}}}" if imported else subject
    rest = "".join(f", {k}: {_value(v)}" for k, v in item.items() if k != kind)
    return f"{{{kind}: {source}{rest}}}"


def _listed(items: list[str], indent: str) -> str:
    """A nats-server list, one item a line (each grant readable on its own)."""
    if not items:
        return "[]"
    inner = "".join(f"{indent}  {i}\n" for i in items)
    return f"[\n{inner}{indent}]"


def _user_entry(name: str, password: str, granted: dict, pad: str) -> str:
    """One user in nats-server's syntax; `password` is written as given (a quoted string,
    or a `$VARIABLE` the server reads from its environment)."""
    deeper = pad + "    "

    def listed(items: list[str], indent: str) -> str:
        return _listed([json.dumps(i) for i in items], indent)

    publish = granted["publish"]
    allow = listed(publish["allow"], deeper + "  ")
    deny = listed(publish.get("deny", []), deeper + "  ")
    subscribe = listed(granted["subscribe"]["allow"], deeper)
    return (
        f"{pad}{{\n{pad}  user: {json.dumps(name)}\n{pad}  password: {password}\n"
        f"{pad}  permissions: {{\n"
        f"{deeper}publish: {{\n{deeper}  allow: {allow}\n{deeper}  deny: {deny}\n{deeper}}}\n"
        f"{deeper}subscribe: {{allow: {subscribe}}}\n"
        + (f"{deeper}allow_responses: true\n" if granted.get("allow_responses") else "")
        + f"{pad}  }}\n{pad}}}"
    )


def _account(account: str, users: list[tuple[str, str, dict]], users_file: str = "") -> str:
    """One account block: its users (name, password as written, users-file entry) or an
    include of them, HOME's JetStream and exports, or another account's imports."""
    pad = "    "
    lines = [f"  {account} {{"]
    if account == HOME:
        lines.append(f"{pad}jetstream: enabled")
        lines.append(f"{pad}exports: {_listed([_entry(e) for e in _exports()], pad)}")
    else:
        imports = [_entry(i, imported=True) for i in _imports(account)]
        lines.append(f"{pad}imports: {_listed(imports, pad)}")
    if users_file:
        lines.append(f"{pad}include {json.dumps(users_file)}")
    else:
        lines.append(f"{pad}users: {_users(users, pad)}")
    lines.append("  }")
    return "\n".join(lines)


def _users(users: list[tuple[str, str, dict]], pad: str) -> str:
    if not users:
        return "[]"
    entries = [_user_entry(n, pw, permissions(n, u), pad + "  ") for n, pw, u in users]
    return "[\n" + "\n".join(entries) + f"\n{pad}]"


def _accounts(users: list[tuple[str, str, dict]], systems_file: str = "") -> str:
    grouped: dict[str, list] = {HOME: [], "API": [], "PROJECTOR": [], "TRIGGERS": [], SYSTEMS: []}
    for entry in users:
        grouped[account_of(entry[0], entry[2])].append(entry)
    return (
        "\n".join(
            _account(a, found, systems_file if a == SYSTEMS else "") for a, found in grouped.items()
        )
        + "\n"
    )


def render_conf(users: dict[str, dict]) -> str:
    """The embedded server's accounts and users, from the users file."""
    found = [(n, json.dumps(u["password"]), u) for n, u in sorted(users.items())]
    header = "# Generated by jetdbt from nats-users.json: change it with `jetdbt access`.\n"
    return header + "accounts {\n" + _accounts(found) + "}\n"


def _password_variable(name: str) -> str:
    return "$" + name.upper().replace("-", "_") + "_PASSWORD"


def render_deploy_accounts() -> str:
    """deploy/nats/accounts.conf: the same accounts for a deployment, each password read from
    the server's environment (RUNNER_PASSWORD...). `python -m jetdbt.services.access.nats_users`
    prints it; a test keeps the committed file equal to it."""
    found = [
        (name, _password_variable(name), {"kind": "service"}) for name in (*SERVICE_USERS, ADMIN)
    ]
    header = (
        "# Generated: python -m jetdbt.services.access.nats_users > deploy/nats/accounts.conf\n"
        "# The rules and why: services/access/nats_users.py. Do not edit by hand.\n"
        "# External systems' users: systems.conf (python -m jetdbt.services.access.nats_users\n"
        "# --system NAME PROJECT... prints one).\n"
    )
    return header + _accounts(found, systems_file="systems.conf")


def render_deploy_system(name: str, projects: list[str], role: str = "runner") -> str:
    """One external system's user for a deployment's systems.conf (its password from
    `$<NAME>_PASSWORD`): `users: [...]` of the SYSTEMS account."""
    _check_system(name, projects, role)
    user = {"kind": "system", "principal": name, "projects": sorted(set(projects)), "role": role}
    return "users: " + _users([(name, _password_variable(name), user)], "") + "\n"


def conf_file(home: Path) -> Path:
    return access_dir(home) / "nats-auth.conf"


def _load(home: Path) -> dict:
    try:
        return json.loads(users_file(home).read_text())
    except (OSError, ValueError):
        return {"users": {}}


def _save(home: Path, found: dict) -> None:
    write_private(users_file(home), json.dumps(found, indent=2) + "\n")
    write_private(conf_file(home), render_conf(found["users"]))


def ensure_users(home: Path) -> Path:
    """Generate the service and admin users on first start (kept after) and the server's
    configuration from today's rules; returns the configuration file."""
    found = _load(home)
    missing = [name for name in _RESERVED if name not in found["users"]]
    for name in missing:
        found["users"][name] = {"kind": "service", "password": secrets.token_urlsafe(32)}
    current = conf_file(home).read_text() if conf_file(home).exists() else ""
    if missing or current != render_conf(found["users"]):  # rules of an earlier version too
        _save(home, found)
    return conf_file(home)


def _check_system(name: str, projects: list[str], role: str) -> None:
    if name in _RESERVED:
        raise AccessError(f"{name!r} is a jetdbt service user; choose another system name")
    try:
        subjects.check_project(name)
        for project in projects:
            if project != "*":
                subjects.check_project(project)
    except subjects.InvalidName as exc:
        raise AccessError(f"{exc} (NATS user and project names follow the same rule)") from None
    if not projects:
        raise AccessError("a system needs at least one project (--project NAME, or '*')")
    if role not in SYSTEM_ROLES:
        raise AccessError(f"a system's role is one of {', '.join(SYSTEM_ROLES)}, not {role!r}")


def add_system(home: Path, name: str, projects: list[str], role: str = "runner") -> str:
    """Add (or replace) an external system's NATS user, principal `name`, allowed to
    publish the commands `role` grants for `projects` ("*": all); returns its password."""
    _check_system(name, projects, role)
    found = _load(home)
    if not found["users"]:
        raise AccessError(f"no generated NATS users under {access_dir(home)}: run `jetdbt up`")
    password = secrets.token_urlsafe(32)
    found["users"][name] = {
        "kind": "system",
        "password": password,
        "principal": name,
        "projects": sorted(set(projects)),
        "role": role,
    }
    _save(home, found)
    return password


def reload_server(home: Path) -> bool:
    """Make the embedded nats-server of `home` read its configuration again (SIGHUP);
    False when it is not running."""
    return signal_server(home / "nats" / "nats-server.pid", b"nats-server", signal.SIGHUP)


def main(argv: list[str]) -> None:
    """`python -m jetdbt.services.access.nats_users` prints accounts.conf; `... --system NAME
    [--role deployer] PROJECT...` prints the account of one external system."""
    if argv[:1] != ["--system"]:
        print(render_deploy_accounts(), end="")
        return
    role, rest = "runner", argv[2:]
    if rest[:1] == ["--role"]:
        role, rest = rest[1], rest[2:]
    print(render_deploy_system(argv[1], rest, role), end="")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

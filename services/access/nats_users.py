"""The NATS users of a jetdbt stack and what each may publish and subscribe to.

One user per role, so a fact carries the authority of who could publish it:
- `runner` alone publishes facts (run, node, state, retry, graph, deploy) and log lines,
  and alone reads the contract's durable consumers (`runners`, `relation_watch`);
- `projector` only reads events;
- `api` reads, and publishes commands on behalf of the token it checked;
- `admin` (the operator and the CLI) may do anything: it applies streams.yaml;
- an external system may publish only commands under its own principal's subject, for
  its projects, and declared writes (`dbt.evt.relation.*.materialized`).
No service user may create, update, purge or delete a stream, nor create or delete the
contract's durable consumers; each user reads replies under its own inbox prefix.

`jetdbt up` generates the users with random passwords into JETDBT_HOME/access (0600) and
starts nats-server with the configuration rendered from them; deploy/nats holds the same
rules for a deployment.
"""

from __future__ import annotations

import json
import secrets
import signal
from pathlib import Path

from services.access.local import ADMIN, access_dir, users_file, write_private
from services.embedded import signal_server
from shared import contract as contract_mod
from shared import subjects
from shared.bus import COMMANDS, EVENTS, inbox_prefix
from shared.identity import BUCKET as IDENTITY
from shared.run_logs import STREAM as LOGS

__all__ = [
    "SERVICE_USERS",
    "AccessError",
    "add_system",
    "conf_file",
    "ensure_users",
    "permissions",
    "reload_server",
    "render_conf",
    "render_deploy_users",
]

SERVICE_USERS = ("runner", "projector", "api")
_RESERVED = (*SERVICE_USERS, ADMIN)


def _buckets() -> list[tuple[str, str]]:
    """(subject prefix, backing stream) of every bucket the runner writes: the contract's
    object stores and key-value buckets, the operator's identity bucket aside."""
    spec = contract_mod.load()
    found = [(f"$O.{name}", f"OBJ_{name}") for name in spec.object_stores]
    found += [(f"$KV.{name}", f"KV_{name}") for name in spec.key_value if name != IDENTITY]
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
# lag and event streams): created, fetched, acked and deleted by the reader.
_READ_EVENTS = [
    f"$JS.API.CONSUMER.CREATE.{EVENTS}",
    f"$JS.API.CONSUMER.CREATE.{EVENTS}.>",
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
    "dbt.evt.>",
    "dbt.log.>",
    *[f"{prefix}.>" for prefix, _ in _buckets()],
    # Retention: a pruned run's log lines and objects (deleting an object purges its chunks).
    f"$JS.API.STREAM.PURGE.{LOGS}",
    *[
        f"$JS.API.STREAM.PURGE.{stream}"
        for prefix, stream in _buckets()
        if prefix.startswith("$O.")
    ],
]
_DECLARED_WRITES = "dbt.evt.relation.*.materialized"


class AccessError(ValueError):
    """An access change that cannot be made as asked; the message says why."""


def _durables() -> list[tuple[str, str]]:
    return [(spec.stream, name) for name, spec in contract_mod.load().consumers.items()]


def _durable_denials(owner: bool) -> list[str]:
    """Nobody creates or deletes the contract's durables; only their owner reads them."""
    denied = []
    for stream, name in _durables():
        denied += [
            f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
            f"$JS.API.CONSUMER.CREATE.{stream}.{name}.>",
            f"$JS.API.CONSUMER.DELETE.{stream}.{name}",
        ]
        if not owner:
            denied += [f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.ACK.{stream}.{name}.>"]
    return denied


def _runner_reads() -> list[str]:
    found = []
    for stream, name in _durables():
        found += [f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.ACK.{stream}.{name}.>"]
    return found


def _system_commands(principal: str, projects: list[str]) -> list[str]:
    tok = subjects.token(principal)
    if "*" in projects:
        return [f"dbt.cmd.*.*.{tok}"]
    return [f"dbt.cmd.*.{subjects.token(p)}.{tok}" for p in projects]


def permissions(name: str, user: dict) -> dict:
    """The nats-server permissions of one user of the users file."""
    inbox = f"{inbox_prefix(name)}.>"
    if name == ADMIN:
        return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    if user.get("kind") == "system":
        return {
            "publish": {
                "allow": [*_system_commands(user["principal"], user["projects"]), _DECLARED_WRITES]
            },
            "subscribe": {"allow": [inbox]},
        }
    allow = {
        "runner": [*_READ, *_READ_EVENTS, *_FACTS, *_runner_reads()],
        "projector": [*_READ, *_READ_EVENTS],
        "api": [*_READ, *_READ_EVENTS, "dbt.cmd.>"],
    }[name]
    subscribe = [inbox, "dbt.cmd.cancel.>"] if name == "runner" else [inbox]
    return {
        "publish": {"allow": allow, "deny": [*_NEVER, *_durable_denials(name == "runner")]},
        "subscribe": {"allow": subscribe},
    }


def _listed(items: list[str], indent: str) -> str:
    """A nats-server list, one subject a line (each grant readable on its own)."""
    if not items:
        return "[]"
    inner = "".join(f"{indent}  {json.dumps(i)}\n" for i in items)
    return f"[\n{inner}{indent}]"


def _user_entry(name: str, password: str, granted: dict) -> str:
    """One user in nats-server's syntax; `password` is written as given (a quoted string,
    or a `$VARIABLE` the server reads from its environment)."""
    publish, pad = granted["publish"], "      "
    return (
        f"  {{\n    user: {json.dumps(name)}\n    password: {password}\n    permissions: {{\n"
        f"      publish: {{\n        allow: {_listed(publish['allow'], pad + '  ')}\n"
        f"        deny: {_listed(publish.get('deny', []), pad + '  ')}\n      }}\n"
        f"      subscribe: {{allow: {_listed(granted['subscribe']['allow'], pad)}}}\n"
        "    }\n  }"
    )


def render_conf(users: dict[str, dict]) -> str:
    """The embedded server's authorization block, from the users file."""
    entries = [
        _user_entry(name, json.dumps(user["password"]), permissions(name, user))
        for name, user in sorted(users.items())
    ]
    header = "# Generated by jetdbt from nats-users.json: change it with `jetdbt access`.\n"
    return header + "authorization {\n users: [\n" + "\n".join(entries) + "\n ]\n}\n"


def render_deploy_users() -> str:
    """deploy/nats/users.conf: the same users for a deployment, each password read from the
    server's environment (RUNNER_PASSWORD...). `python -m services.access.nats_users`
    prints it; a test keeps the committed file equal to it."""
    entries = [
        _user_entry(name, f"${name.upper()}_PASSWORD", permissions(name, {"kind": "service"}))
        for name in (*SERVICE_USERS, ADMIN)
    ]
    header = (
        "# Generated: python -m services.access.nats_users > deploy/nats/users.conf\n"
        "# The rules and why: services/access/nats_users.py. Do not edit by hand.\n"
    )
    return header + "users: [\n" + "\n".join(entries) + "\n]\n"


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
    """Generate the service and admin users on first start (kept after); returns the
    server configuration file."""
    found = _load(home)
    missing = [name for name in _RESERVED if name not in found["users"]]
    for name in missing:
        found["users"][name] = {"kind": "service", "password": secrets.token_urlsafe(32)}
    if missing or not conf_file(home).exists():
        _save(home, found)
    return conf_file(home)


def add_system(home: Path, name: str, projects: list[str]) -> str:
    """Add (or replace) an external system's NATS user, principal `name`, allowed to
    publish commands for `projects` ("*": all); returns its password."""
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
    found = _load(home)
    if not found["users"]:
        raise AccessError(f"no generated NATS users under {access_dir(home)}: run `jetdbt up`")
    password = secrets.token_urlsafe(32)
    found["users"][name] = {
        "kind": "system",
        "password": password,
        "principal": name,
        "projects": sorted(set(projects)),
    }
    _save(home, found)
    return password


def reload_server(home: Path) -> bool:
    """Make the embedded nats-server of `home` read its configuration again (SIGHUP);
    False when it is not running."""
    return signal_server(home / "nats" / "nats-server.pid", b"nats-server", signal.SIGHUP)


if __name__ == "__main__":
    print(render_deploy_users(), end="")

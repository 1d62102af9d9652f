"""The one home of subject names and subject-token encoding.

NATS splits subjects on '.', treats '*' and '>' as wildcards and forbids white
space, so no user string is ever spliced into a subject raw: project names must
already be safe tokens, everything else goes through `token()`.
"""

from __future__ import annotations

import base64
import re

from jetdbt.shared.wording.short_quote import quote

__all__ = [
    "InvalidName",
    "MAX_TOKEN_CHARS",
    "check_project",
    "check_run_id",
    "token",
    "filed_under",
    "untoken",
    "command",
    "command_of_any_project",
    "command_verb",
    "command_principal",
    "ALL_COMMANDS",
    "ALL_EVENTS",
    "ALL_LOGS",
    "ALL_INTAKE",
    "ALL_SCHEDULES",
    "ALL_HOOK_CONTROL",
    "family_pattern",
    "event_family",
    "event_kind",
    "keyed_by",
    "is_declared_write",
    "run_family_pattern",
    "command_pattern",
    "via_api",
    "API_COMMANDS",
    "INTAKE",
    "intake_writes",
    "intake_write",
    "intake_publisher",
    "ANONYMOUS",
    "deploy_event",
    "run_event",
    "run_event_of_any_project",
    "CANCELS_REQUESTED",
    "node_event",
    "graph_event",
    "relation_event",
    "run_log",
    "retry_event",
    "state_event",
    "run_pattern",
    "project_pattern",
    "deploy_pattern",
    "deployed_of_any_project",
    "state_pattern",
    "subject_key",
    "COMMAND_VERBS",
    "check_job_name",
    "check_environment_name",
    "promotion_event",
    "promotion_pattern",
    "job_event",
    "job_refused",
    "schedule_event",
    "SCHEDULES",
    "schedule_definition",
    "schedule_parked",
    "schedule_target",
    "FIRES",
    "check_hook_name",
    "hook_event",
    "HOOK_CONTROL",
    "hook_control",
    "hook_control_project",
    "covering",
    "SubjectFilter",
]

_SAFE = re.compile(r"[a-z0-9][a-z0-9_-]{0,127}\Z")
# A user string in a subject (a principal, a relation key) is at most this long, so
# a subject stays far below the server's limit: one over 4 KB closes the connection.
MAX_TOKEN_CHARS = 256
COMMAND_VERBS = ("deploy", "run", "cancel", "job", "promote")
# Every subject of one kind: what a permission, an account's import or a metric spans.
ALL_COMMANDS = "dbt.cmd.>"
ALL_EVENTS = "dbt.evt.>"
ALL_LOGS = "dbt.log.>"
# A command the API published for a token it checked ends in this token: only the API's NATS
# user may publish `dbt.cmd.<verb>.<project>.<principal>.api`, so the server vouches for it.
_API = "api"
API_COMMANDS = f"dbt.cmd.*.*.*.{_API}"
# The triggers service's runs are asked for by this principal, on these subjects only
# (a service user's name: no system or token may take it).
TRIGGERS_PRINCIPAL = "triggers"
TRIGGER_COMMANDS = f"dbt.cmd.run.*.{TRIGGERS_PRINCIPAL}"
# Where external systems declare their writes, each under its own principal
# (`dbt.in.<principal>.relation.<relation>.materialized`); runners record the facts.
INTAKE = "dbt.in"
ALL_INTAKE = f"{INTAKE}.>"
# The principal of a command whose subject names none (`dbt.cmd.<verb>.<project>`): only
# an operator's NATS user may publish such a subject, so it stands for nobody in particular.
ANONYMOUS = "anonymous"


class InvalidName(ValueError):
    """A name that cannot become a subject token as written."""


def check_project(name: str) -> str:
    """Return `name` if it is a valid project name, else raise naming the rule."""
    if not isinstance(name, str) or not _SAFE.match(name):
        raise InvalidName(
            f"project name {quote(name)} is invalid: use lowercase letters, digits, '_' and '-',"
            " starting with a letter or digit (at most 128 characters)"
        )
    return name


def check_job_name(name: str) -> str:
    """Job names travel in subjects and run ids, so they follow the project-name rule."""
    return _short_name("job", name)


_ENVIRONMENT = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")


def check_environment_name(name: str) -> str:
    """A project environment's name (`prod`, `staging`, `dev`): it travels in subjects and
    becomes part of schema names, so it is short and plain."""
    if not isinstance(name, str) or not _ENVIRONMENT.match(name):
        raise InvalidName(
            f"environment name {quote(name)} is invalid: use lowercase letters, digits, '_' and"
            " '-', starting with a letter (at most 32 characters)"
        )
    return name


def check_hook_name(name: str) -> str:
    """A webhook's name travels in its facts' subjects, like a job's."""
    return _short_name("hook", name)


def _short_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _SAFE.match(name) or len(name) > 64:
        raise InvalidName(
            f"{kind} name {quote(name)} is invalid: use lowercase letters, digits, '_' and '-',"
            " starting with a letter or digit (at most 64 characters)"
        )
    return name


def check_run_id(run_id: str) -> str:
    """Run ids travel in subjects, so they follow the project-name rule."""
    if not isinstance(run_id, str) or not _SAFE.match(run_id):
        raise InvalidName(
            f"run id {quote(run_id)} is invalid: use lowercase letters, digits, '_' and '-'"
            " (at most 128 characters)"
        )
    return run_id


def filed_under(value: str) -> str:
    """What a refusal of malformed input is filed under (a project, a relation): `value`
    when a subject can carry it and it prints, else a marked prefix of its printable
    spelling; the '…' keeps it from ever naming a real project or relation."""
    if value.isprintable() and len(value) <= 128:
        return value
    shown = value if value.isprintable() else repr(value)[1:-1]
    return shown[:64] + "…"


def token(value: str) -> str:
    """Encode any user string as one subject token.

    Safe strings pass through unchanged so subjects stay readable; anything else
    becomes '_' + unpadded lowercase base32. A plain token never starts with '_',
    so the two spellings cannot collide.
    """
    if _SAFE.match(value):
        return value
    if len(value) > MAX_TOKEN_CHARS:
        raise InvalidName(
            f"{quote(value)} is too long for a subject token: at most {MAX_TOKEN_CHARS} characters"
        )
    raw = base64.b32encode(value.encode()).decode().rstrip("=").lower()
    return "_" + raw


def untoken(tok: str) -> str:
    """Invert `token()`."""
    if not tok.startswith("_"):
        return tok
    raw = tok[1:].upper()
    return base64.b32decode(raw + "=" * (-len(raw) % 8)).decode()


def command(verb: str, project: str, principal: str, *, via_api: bool = False) -> str:
    """`dbt.cmd.<verb>.<project>.<principal>`: the principal is who published, and NATS
    permissions let a system's user publish only its own principal's subjects; the API's
    commands end in `.api`, a subject only the API may publish."""
    tail = f".{_API}" if via_api else ""
    return f"dbt.cmd.{verb}.{token(project)}.{token(principal or ANONYMOUS)}{tail}"


def command_of_any_project(verb: str, principal: str) -> str:
    """`principal`'s `verb` commands in every project: what a system of all projects may publish."""
    return f"dbt.cmd.{verb}.*.{token(principal or ANONYMOUS)}"


def command_verb(subject: str) -> str:
    """The verb a command subject names (its third token), "" when it has none."""
    parts = subject.split(".")
    return parts[2] if len(parts) > 2 else ""


def via_api(subject: str) -> bool:
    """Whether a command subject is one only the API's NATS user may publish."""
    parts = subject.split(".")
    return len(parts) == 6 and parts[5] == _API


def intake_writes(principal: str) -> str:
    """Every declared write of one publisher, in the intake."""
    return f"{INTAKE}.{token(principal)}.relation.*.materialized"


def intake_write(principal: str, relation: str) -> str:
    return f"{INTAKE}.{token(principal)}.relation.{token(relation)}.materialized"


def intake_publisher(subject: str) -> tuple[str, str]:
    """(publisher, relation token) of an intake subject; raises InvalidName for another."""
    parts = subject.split(".")
    if len(parts) != 6 or ".".join(parts[:2]) != INTAKE or parts[3] != "relation":
        raise InvalidName(f"{quote(subject)} is not an intake subject")
    try:
        return untoken(parts[2]), parts[4]
    except ValueError:
        raise InvalidName(f"publisher token {quote(parts[2])} is not a subject token") from None


def command_pattern(verb: str, project: str) -> str:
    """Every principal's `verb` commands of `project`, through either door."""
    return f"dbt.cmd.{verb}.{token(project)}.>"


def command_principal(subject: str) -> str:
    """The principal a command subject names, decoded: its fifth token, ANONYMOUS when it
    has none. Raises InvalidName for a token that is not a `token()` spelling or for
    tokens past the principal."""
    parts = subject.split(".")
    if via_api(subject):
        parts = parts[:5]
    if len(parts) < 5:
        return ANONYMOUS
    if len(parts) > 5:
        raise InvalidName(
            f"command subject {quote(subject)} has tokens past the principal:"
            " publish on dbt.cmd.<verb>.<project>.<principal>"
        )
    try:
        name = untoken(parts[4])
    except ValueError:
        raise InvalidName(f"principal token {quote(parts[4])} is not a subject token") from None
    if not name or token(name) != parts[4]:
        raise InvalidName(f"principal token {quote(parts[4])} is not a subject token")
    return name


def deploy_event(project: str, kind: str) -> str:
    return f"dbt.evt.deploy.{token(project)}.{kind}"


def promotion_event(project: str, slot: str) -> str:
    """What one slot of a project runs: an environment (`prod`), a person's own environment
    (`dev/<principal>`) or a pull request's check (`pr:<n>`). Its last message is the
    version the slot holds now (jetdbt.shared.bus.events.Promoted.slot spells it)."""
    return f"dbt.evt.deploy.{token(project)}.{token(slot)}.promoted"


def promotion_pattern(project: str | None) -> str:
    """Every promotion of a project (of every project when it is None)."""
    return f"dbt.evt.deploy.{token(project) if project else '*'}.*.promoted"


def run_event(project: str, run_id: str, kind: str) -> str:
    return f"dbt.evt.run.{token(project)}.{token(run_id)}.{kind}"


# Every run's recorded cancel: what runners follow to stop the run they hold.
CANCELS_REQUESTED = "dbt.evt.run.*.*.cancel_requested"


def run_family_pattern(family: str, run_id: str) -> str:
    """Every event of one family (run, node) of `run_id`, whichever project it belongs to."""
    return f"dbt.evt.{family}.*.{token(run_id)}.>"


def run_event_of_any_project(run_id: str, kind: str) -> str:
    """One kind of event of `run_id`, whichever project it belongs to."""
    return f"dbt.evt.run.*.{token(run_id)}.{kind}"


def node_event(project: str, run_id: str, kind: str) -> str:
    return f"dbt.evt.node.{token(project)}.{token(run_id)}.{kind}"


def graph_event(project: str, scope: str, key: str) -> str:
    """`key` is the version for a deployed graph, the run id for a run's or a parse's own."""
    return f"dbt.evt.graph.{token(project)}.{scope}.{token(key)}"


def relation_event(relation: str, kind: str) -> str:
    """Declared writes from other systems: the relation key is a user string like any other."""
    return f"dbt.evt.relation.{token(relation)}.{kind}"


def is_declared_write(subject: str) -> bool:
    """`dbt.evt.relation.<key>.materialized`: what an external system's NATS user may publish."""
    parts = subject.split(".")
    return (
        len(parts) == 5 and parts[:3] == ["dbt", "evt", "relation"] and parts[4] == "materialized"
    )


def retry_event(project: str, principal: str, kind: str) -> str:
    """Retry state is one subject per (project, principal): the last message is the state."""
    return f"dbt.evt.retry.{token(project)}.{token(principal or ANONYMOUS)}.{kind}"


def state_event(project: str, environment_key: str, kind: str) -> str:
    """One subject per (project, environment): its last message is the environment's state."""
    return f"dbt.evt.state.{token(project)}.{token(environment_key)}.{kind}"


def job_event(project: str, name: str, kind: str) -> str:
    """A job's definition: `saved` or `deleted`; the last of `job_event(p, name, "*")` is
    what the job is now."""
    return f"dbt.evt.job.{token(project)}.{token(name)}.{kind}"


def job_refused(project: str) -> str:
    """A job command that was refused (its name may be what is wrong)."""
    return f"dbt.evt.job.{token(project)}.refused"


def schedule_event(project: str, job: str, kind: str) -> str:
    """A job's schedule: `saved` (its state now: active, paused, removed) and each `fired`."""
    return f"dbt.evt.schedule.{token(project)}.{token(job)}.{kind}"


def hook_event(project: str, hook: str, kind: str) -> str:
    """A webhook's facts: `saved`, `removed`, and each `delivery` attempt."""
    return f"dbt.evt.hook.{token(project)}.{token(hook)}.{kind}"


# Hooks are added and removed by a request to the notifier, never a stored command: the
# request carries the hook's secret, which no stream may keep. Only the API's account and
# the operator may publish here (services/access/nats_users.py).
HOOK_CONTROL = "dbt.hookctl"
ALL_HOOK_CONTROL = f"{HOOK_CONTROL}.>"


def hook_control(project: str) -> str:
    return f"{HOOK_CONTROL}.{token(project)}"


def hook_control_project(subject: str) -> str:
    """The project a hook request's subject names, decoded; raises ValueError for a token
    that is not a `token()` spelling."""
    return untoken(subject.split(".")[-1])


# Where JetStream message schedules live: DBT_SCHEDULES, which only runners publish to. The
# server fires a schedule only into the stream that holds it, so a definition's target is
# `dbt.fire.run.<project>.<principal>`, and DBT_COMMANDS sources `dbt.fire.>` as `dbt.cmd.>`
# (streams.yaml): a fire arrives as the run command it is. No schedule lives among commands,
# whose headers any client chooses.
SCHEDULES = "dbt.sched"
ALL_SCHEDULES = f"{SCHEDULES}.>"
FIRES = "dbt.fire"


def schedule_definition(project: str, job: str) -> str:
    return f"{SCHEDULES}.{token(project)}.{token(job)}"


def schedule_target(project: str, principal: str) -> str:
    """Where a schedule fires: the run command of `principal` in `project`, once sourced."""
    return f"{FIRES}.run.{token(project)}.{token(principal)}"


def schedule_parked(project: str, job: str) -> str:
    """Where a paused or removed schedule's last, one-shot definition fires: no one reads it."""
    return f"{SCHEDULES}.parked.{token(project)}.{token(job)}"


def run_log(run_id: str) -> str:
    return f"dbt.log.{token(run_id)}"


def run_pattern(project: str | None, run_id: str) -> str:
    """Every event of one run: of `project`, or of any project when it is None."""
    return f"dbt.evt.*.{token(project) if project else '*'}.{token(run_id)}.>"


def project_pattern(project: str | None) -> str:
    """Every event keyed by `project` (a declared write whose relation token is the same
    word matches too), or every event when it is None."""
    return f"dbt.evt.*.{token(project)}.>" if project else "dbt.evt.>"


def deploy_pattern(project: str) -> str:
    """Every deploy event of a project, its promotions included."""
    return f"dbt.evt.deploy.{token(project)}.>"


def deployed_of_any_project() -> str:
    """Every version deployed, of every project."""
    return "dbt.evt.deploy.*.deployed"


def family_pattern(family: str) -> str:
    """Every event of one family (job, hook...), of every project."""
    return f"dbt.evt.{family}.>"


def event_family(subject: str) -> str:
    """An event subject's family (`dbt.evt.<family>...`: run, node, deploy...), "" for
    another subject."""
    parts = subject.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["dbt", "evt"] else ""


def event_kind(subject: str) -> str:
    """What an event subject says happened: its last token (started, finished...)."""
    return subject.rsplit(".", 1)[-1]


def keyed_by(subject: str, project: str) -> bool:
    """Whether a command or event subject's fourth token is `project`'s."""
    parts = subject.split(".")
    return len(parts) > 3 and parts[3] == token(project)


def state_pattern(project: str) -> str:
    """Every environment's state events of a project."""
    return f"dbt.evt.state.{token(project)}.>"


def subject_key(subject: str) -> str:
    """What a command or event subject is keyed by, decoded: its fourth token, the project
    (`dbt.cmd.<verb>.<project>`, `dbt.evt.<family>.<project>...`) or a declared write's
    relation. Kept as written when it is not a `token()` spelling; "" when there is none."""
    parts = subject.split(".")
    if len(parts) < 4:
        return ""
    try:
        return untoken(parts[3])
    except ValueError:
        return parts[3]


def covering(patterns: list[str]) -> str:
    """The narrowest single filter holding every pattern: their common leading tokens, then
    `>`. JetStream serves a consumer with one filter subject about ten times faster than one
    with several on a log of many run subjects (bench/bench_replay.py), so readers filter
    on this and sort the rest out with `SubjectFilter`."""
    if len(patterns) == 1:
        return patterns[0]
    split = [p.split(".") for p in patterns]
    common = []
    for tokens in zip(*split, strict=False):
        if len(common) == min(map(len, split)) - 1 or len(set(tokens)) > 1:
            break
        if tokens[0] in ("*", ">"):
            break
        common.append(tokens[0])
    return ".".join([*common, ">"])


class SubjectFilter:
    """Tests a subject against patterns as NATS does: `*` is one token, a final `>` the rest.

    Patterns of the common `a.b.>` form are a prefix test, so filtering every message of
    a replay stays cheap.
    """

    def __init__(self, patterns: list[str]):
        plain = [p for p in patterns if p.endswith(".>") and "*" not in p and p.count(">") == 1]
        self._prefixes = tuple(p[:-1] for p in plain)
        self._others = [p.split(".") for p in patterns if p not in plain]

    def __call__(self, subject: str) -> bool:
        if subject.startswith(self._prefixes):
            return True
        if not self._others:
            return False
        got = subject.split(".")
        return any(_tokens_match(got, want) for want in self._others)


def _tokens_match(got: list[str], want: list[str]) -> bool:
    for i, w in enumerate(want):
        if w == ">":
            return len(got) > i
        if i >= len(got) or (w != "*" and w != got[i]):
            return False
    return len(got) == len(want)

"""Commands other systems publish on `dbt.cmd.<verb>.<project>.<principal>`, and their
strict decoding. `requested_by`, when given, must be the subject's principal.

A run's arguments are one command block whose variant IS the command, so each
variant carries exactly the overrides it takes. Unknown keys are errors: a typo
in an override must not silently build the whole project.
"""

from __future__ import annotations

import re
import zoneinfo
from typing import Annotated, Any, Literal, get_args

import msgspec
from jetdbt.shared.blobs.digests import check_digest
from jetdbt.shared.bus import subjects
from jetdbt.shared.project.arguments import DBT_WORDS, TAKES, check_macro, check_value
from jetdbt.shared.project.bundle import Skipped
from jetdbt.shared.runs.relations import parse
from jetdbt.shared.wording.short_quote import quote, shorten

__all__ = [
    "AnyDbtCommand",
    "DBT_COMMANDS",
    "DbtCommand",
    "BuildCommand",
    "ModelsCommand",
    "TestCommand",
    "SeedCommand",
    "SnapshotCommand",
    "FreshnessCommand",
    "DocsCommand",
    "ShowCommand",
    "CompileCommand",
    "OperationCommand",
    "ClosePrCommand",
    "CLOSE_PR_LINE",
    "MAX_SHOW_LIMIT",
    "dbt_command",
    "ParseCommand",
    "RetryCommand",
    "RunCommand",
    "JobRun",
    "TRIGGERS",
    "MAX_TRIGGER_DEPTH",
    "DeployCommand",
    "PromoteCommand",
    "MAX_PR",
    "CommandRejected",
    "decode_run",
    "decode_deploy",
    "decode_cancel",
    "decode_job",
    "decode_promote",
    "JobCommand",
    "JobSpec",
    "JOB_ACTIONS",
    "CancelCommand",
    "check_selection",
    "MAX_COMMAND_BYTES",
    "MAX_PRINCIPAL_CHARS",
    "MAX_SKIPPED_LISTED",
]

# A command is a request, not a payload: anything larger is refused unread.
MAX_COMMAND_BYTES = 64 * 1024
# The skipped files a deploy command names (the rest are counted): a project folder may hold
# thousands (images, a JETDBT_HOME), and their list must never grow a command past its limit.
MAX_SKIPPED_LISTED = 100
# A principal travels in subjects (retry state is per project and principal).
MAX_PRINCIPAL_CHARS = 128
# The id a run asked for without one gets: `c` and its command's stream sequence. A command
# may not name such an id itself, or it could take a later command's run ahead of it.
DEFAULT_ID = re.compile(r"c[0-9]+")
Principal = Annotated[str, msgspec.Meta(max_length=MAX_PRINCIPAL_CHARS)]
# A scratch schema a run may name: one plain identifier, the same in every warehouse.
SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# A pull request's number: it names the PR's own schema (`<schema>__pr_<n>`) and slot.
MAX_PR = 10**9
PullRequest = Annotated[int, msgspec.Meta(ge=0, le=MAX_PR)]


def _check_environment(name: str) -> None:
    """ "" is the project's default environment; any other name is checked as a subject token."""
    if name:
        subjects.check_environment_name(name)


def check_selection(field: str, items: list[str]) -> None:
    """A selection item is a dbt selector, never a flag (jetdbt.shared.project.arguments)."""
    for i, item in enumerate(items):
        check_value(f"{field}[{i}]", item)


class DbtCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="label"):
    """A dbt command over the project's nodes; its label is the command
    (jetdbt.shared.project.arguments
    says which dbt words and which overrides each takes). One variant per command, so a
    run-operation's macro or a show's limit travels only with its own command."""

    select: list[str] = []
    exclude: list[str] = []
    vars: dict[str, Any] = {}
    full_refresh: bool = False
    defer: bool | None = None  # None: the descriptor's `defer`
    # A scratch schema the run builds into instead of its profile's (a CI run's); such a
    # run never publishes the environment's state, and a deferral still reads the profile's.
    schema: str | None = None

    @property
    def label(self) -> str:
        return type(self).__struct_config__.tag

    def dbt_words(self) -> tuple[str, ...]:
        return DBT_WORDS[self.label]

    def __post_init__(self):
        check_selection("select", self.select)
        check_selection("exclude", self.exclude)
        if self.schema is not None and not SCHEMA.fullmatch(self.schema):
            raise ValueError(
                f"schema {shorten(self.schema, 80)!r} is not a plain schema name: letters,"
                " digits and underscores, at most 63, not starting with a digit"
            )
        takes = TAKES[self.label]
        if self.full_refresh and "full_refresh" not in takes:
            raise ValueError(f"{self.label} takes no full_refresh")
        if self.defer is not None and "defer" not in takes:
            raise ValueError(f"{self.label} takes no defer")


class BuildCommand(DbtCommand, frozen=True, tag="build"):
    """`dbt build` (or, by test_behavior, the build without tests); `test_behavior` None
    keeps the descriptor's."""

    test_behavior: Literal["build", "after_all", "none"] | None = None


class ModelsCommand(DbtCommand, frozen=True, tag="run"):
    """`dbt run`: models only."""


class TestCommand(DbtCommand, frozen=True, tag="test"):
    """`dbt test`: data and unit tests against what is built."""


class SeedCommand(DbtCommand, frozen=True, tag="seed"):
    """`dbt seed`."""


class SnapshotCommand(DbtCommand, frozen=True, tag="snapshot"):
    """`dbt snapshot`."""


class FreshnessCommand(DbtCommand, frozen=True, tag="source_freshness"):
    """`dbt source freshness`: each source's status by its own warn/error thresholds."""


class DocsCommand(DbtCommand, frozen=True, tag="docs_generate"):
    """`dbt docs generate`: the catalog (columns with their warehouse types)."""


# What a show may preview: dbt's own default is 5 rows; a preview is not an export.
MAX_SHOW_LIMIT = 500


class ShowCommand(DbtCommand, frozen=True, tag="show"):
    """`dbt show` of the selected node: a row preview, deferring like a build. Only nodes
    of the project: inline SQL would be a query the project never held."""

    limit: int = 5

    def __post_init__(self):
        super().__post_init__()
        if not self.select:
            raise ValueError("show needs a select naming the node to preview")
        if not 0 < self.limit <= MAX_SHOW_LIMIT:
            raise ValueError(f"show limit is {self.limit}; from 1 to {MAX_SHOW_LIMIT}")


class CompileCommand(DbtCommand, frozen=True, tag="compile"):
    """`dbt compile`: the SQL dbt renders for the selected nodes, kept in each node's record
    of the run (GET /v1/runs/{run_id}/nodes/{unique_id}); nothing is built."""


class OperationCommand(DbtCommand, frozen=True, tag="run_operation"):
    """`dbt run-operation MACRO --args ARGS`: a macro of the project or its packages."""

    macro: str = ""
    macro_args: dict[str, Any] = {}

    def __post_init__(self):
        super().__post_init__()
        check_macro(self.macro)
        if self.select or self.exclude:
            raise ValueError("run_operation selects no nodes: it takes no select or exclude")


# How a close_pr run's log names each relation it drops: these words, then the relation.
CLOSE_PR_LINE = "jetdbt close_pr: dropping "


class ClosePrCommand(DbtCommand, frozen=True, tag="close_pr"):
    """Drop a pull request's schema and every relation in it, when the PR closes: a macro the
    runner writes runs as `dbt run-operation` against the schema the run's plan computes for
    the run's `pr`, so nothing the command says names a schema. Only a run with a `pr` may be
    one; it takes no selection, vars or overrides."""

    def __post_init__(self):
        super().__post_init__()
        given = [
            name
            for name in ("select", "exclude", "vars", "schema")
            if getattr(self, name) not in ([], {}, None)
        ]
        if given:
            raise ValueError(
                f"close_pr drops the pull request's own schema and takes no {', '.join(given)}"
            )


# Every dbt command a run may be; the runner plans and runs each the same way.
DBT_COMMANDS = (
    BuildCommand,
    ModelsCommand,
    TestCommand,
    SeedCommand,
    SnapshotCommand,
    FreshnessCommand,
    DocsCommand,
    ShowCommand,
    CompileCommand,
    OperationCommand,
    ClosePrCommand,
)
AnyDbtCommand = (
    BuildCommand
    | ModelsCommand
    | TestCommand
    | SeedCommand
    | SnapshotCommand
    | FreshnessCommand
    | DocsCommand
    | ShowCommand
    | CompileCommand
    | OperationCommand
    | ClosePrCommand
)


def dbt_command(name: str, **fields: Any) -> AnyDbtCommand:
    """The dbt command `name` (its label, or dbt's spelling: `source freshness`,
    `run-operation`) with `fields`; a ValueError names the field that is wrong."""
    label = name.strip().replace(" ", "_").replace("-", "_")
    if label not in DBT_WORDS:
        raise ValueError(
            f"unknown dbt command {quote(name)}; known: "
            + ", ".join(dict.fromkeys(" ".join(words) for words in DBT_WORDS.values()))
        )
    try:
        return msgspec.convert({"label": label, **fields}, AnyDbtCommand)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{' '.join(DBT_WORDS[label])}: {shorten(str(exc), 300)}") from None


class RetryCommand(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    omit_defaults=True,  # as submitted: `old_version` only when asked for
    tag="retry",
    tag_field="label",
):
    """Resume the named run with `dbt retry`; it must be the run the retry state holds.
    A retry resumes the version its run built; when a newer one is deployed it is refused,
    naming both, unless `old_version` says to resume the old one anyway."""

    dbt_retry_job: str
    old_version: bool = False

    def __post_init__(self):
        subjects.check_run_id(self.dbt_retry_job)


class ParseCommand(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="parse", tag_field="label"
):
    """Parse and store a graph: of a bundle not deployed (its digest, already in the object
    store), or of the deployed version with these vars. Builds nothing."""

    bundle_digest: str | None = None
    vars: dict[str, Any] = {}

    def __post_init__(self):
        if self.bundle_digest is not None:
            check_digest(self.bundle_digest)


class JobRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="job", tag_field="label"):
    """Run the saved job `name`: its command, selection, vars and test behaviour as the job
    holds them when the runner takes the command (read from the log, never a projection)."""

    name: str

    def __post_init__(self):
        subjects.check_job_name(self.name)


# What started a run: a person (`manual`), a job's schedule, a relation it reads written,
# another job's run ending (`after`), the API, or another system on NATS. A runner records
# it from what the server vouches for; only the operator's own processes may claim one.
Trigger = Literal["", "manual", "schedule", "relation", "after", "api", "nats"]
TRIGGERS: tuple[str, ...] = get_args(Trigger)[1:]  # "": a run from before triggers
# How many triggered runs deep a chain of causes may go (a run of a `relation` or `after`
# trigger is one deeper than the run that caused it): a cycle that a deploy closes after its
# jobs were saved stops at this depth, refused and recorded, instead of running forever.
MAX_TRIGGER_DEPTH = 8


class RunCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.run.<project>`."""

    command: AnyDbtCommand | RetryCommand | ParseCommand | JobRun
    args: dict[str, Any] = {}
    run_id: str | None = None
    requested_by: Principal = ""
    hidden: bool = False
    trigger: Trigger = ""
    # A triggered run's place in its chain of causes (the triggers service's: 1 when no
    # trigger started its cause, one more than its cause's otherwise; 0 for any other run):
    # a runner refuses one past MAX_TRIGGER_DEPTH.
    depth: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 0
    # The project environment the run builds in ("": the project's default one), and its
    # version is what that environment holds when the runner takes the command. A pull
    # request's check (`pr` > 0) builds the version its PR uploaded into the PR's own
    # schema instead, deferring to `environment`'s state; it changes no environment.
    environment: str = ""
    pr: PullRequest = 0

    def __post_init__(self):
        _check_environment(self.environment)
        if isinstance(self.command, ClosePrCommand) and not self.pr:
            raise ValueError("close_pr closes a pull request's schema: the run names its pr")
        if self.run_id is not None:
            subjects.check_run_id(self.run_id)
            if DEFAULT_ID.fullmatch(self.run_id):
                raise ValueError(
                    f"run id {self.run_id!r} has the form c<digits>, which names the run of"
                    " the command with that sequence (a run asked for without a run id):"
                    " choose another run id"
                )


# What a deploy may say of the folder it came from (services/cli/deploy_source.py): a few marks.
SourceMarks = Annotated[
    list[Annotated[str, msgspec.Meta(max_length=200)]], msgspec.Meta(max_length=8)
]


class DeployCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.deploy.<project>`: the bundle is already in the object store.
    `source` names the folder it came from (none: not said); a deploy from another folder
    than the project's current version is refused unless `replace_source` is set."""

    bundle_digest: str
    bundle_size: int
    skipped: Annotated[list[Skipped], msgspec.Meta(max_length=MAX_SKIPPED_LISTED)] = []
    deploy_id: str | None = None
    requested_by: Principal = ""
    # Every file the pack left out, of which `skipped` names the first (0: as many as named).
    skipped_count: Annotated[int, msgspec.Meta(ge=0)] = 0
    source: SourceMarks = []
    replace_source: bool = False
    # Which environment the version is promoted into once it parsed ("": the project's
    # default one); `promote` false promotes it nowhere. A pull request's version (`pr` > 0)
    # is promoted into nothing but the PR's own slot.
    environment: str = ""
    promote: bool = True
    pr: PullRequest = 0

    def __post_init__(self):
        _check_environment(self.environment)
        check_digest(self.bundle_digest)
        if self.deploy_id is not None:
            subjects.check_run_id(self.deploy_id)


# A version names its digest, or a prefix of at least 12 of its hex digits.
_VERSION = re.compile(r"(sha256:)?[0-9a-f]{12,64}")
_VERSION_FORM = (
    "a version's digest (sha256: and 64 lowercase hex digits) or a prefix of at least 12 of"
    " its hex digits, such as sha256:0a9b8c7d6e5f or 0a9b8c7d6e5f"
)


class PromoteCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.promote.<project>`: make `environment` ("": the default one) run
    `version`, a version of the project deployed before (its digest, or a prefix of at
    least 12 characters naming one version). Promoting an older version is the rollback."""

    # Checked in __post_init__ alone, so a bad one is refused in words, not msgspec's; the
    # schema still says its bounds.
    version: Annotated[
        str,
        msgspec.Meta(
            description=_VERSION_FORM,
            extra_json_schema={"pattern": f"^{_VERSION.pattern}$"},
        ),
    ]
    environment: str = ""
    requested_by: Principal = ""

    def __post_init__(self):
        _check_environment(self.environment)
        if not _VERSION.fullmatch(self.version):
            raise ValueError(
                f"version {quote(self.version, 80)} is not a version: give {_VERSION_FORM}"
            )


class CancelCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.cancel.<project>`: the run of that project to stop."""

    run_id: str
    requested_by: Principal = ""

    def __post_init__(self):
        subjects.check_run_id(self.run_id)


# The end of another job's run that starts this one (`any`: whichever way it ended).
OUTCOMES = ("passed", "failed", "cancelled", "any")


class JobAfter(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Run the job when a run of job `job` (same project) ends with `outcome`."""

    job: str
    outcome: Literal["passed", "failed", "cancelled", "any"] = "any"

    def __post_init__(self):
        subjects.check_job_name(self.job)


MAX_TRIGGER_RELATIONS = 32


class JobSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What a saved job runs: a dbt command with its selection, vars and overrides (a
    build's test_behavior among them), and the run arguments its descriptor's placeholders
    take. Its triggers (services/triggers): a declared write of a relation in
    `on_relation` (`dbt://<warehouse>/<schema>/<name>`, as jetdbt.shared.runs.relations spells it),
    or the end of another job's run (`after`)."""

    command: AnyDbtCommand = BuildCommand()
    args: dict[str, Any] = {}
    on_relation: list[str] = []
    after: JobAfter | None = None
    # The project environment the job's runs build in ("": the project's default one).
    environment: str = ""

    def __post_init__(self):
        _check_environment(self.environment)
        if isinstance(self.command, ClosePrCommand):
            raise ValueError("a job cannot close a pull request: close_pr runs as its own run")
        if len(self.on_relation) > MAX_TRIGGER_RELATIONS:
            raise ValueError(
                f"on_relation names {len(self.on_relation)} relations; at most"
                f" {MAX_TRIGGER_RELATIONS}"
            )
        for relation in self.on_relation:
            spelled = parse(relation).key
            if spelled != relation:
                raise ValueError(
                    f"on_relation {quote(relation)} is spelled {quote(spelled)} by every"
                    " producer: subscribe to that"
                )


# A schedule's expression reaches the server as a header value: printable ASCII only, short.
_SCHEDULE = re.compile(r"[ -~]{1,100}")
JOB_ACTIONS = ("save", "delete", "schedule", "pause", "resume", "unschedule")


class JobCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.job.<project>`: save or delete a job, or set its schedule (a cron
    with seconds, `sec min hour day month weekday`, or `@every 30s`, in time zone `tz`),
    pause, resume or remove it."""

    action: Literal["save", "delete", "schedule", "pause", "resume", "unschedule"]
    name: str
    job: JobSpec | None = None
    cron: str = ""
    tz: str = ""
    requested_by: Principal = ""

    def __post_init__(self):
        subjects.check_job_name(self.name)
        if (self.action == "save") != (self.job is not None):
            raise ValueError("a job is given with action save, and only then")
        if self.action != "schedule" and (self.cron or self.tz):
            raise ValueError("cron and tz are given with action schedule, and only then")
        if self.action == "schedule":
            if not _SCHEDULE.fullmatch(self.cron):
                raise ValueError(
                    f"cron is {quote(self.cron)}: a schedule is printable text of 1 to 100"
                    " characters (`0 0 6 * * *`, `@every 30s`)"
                )
            if self.tz:
                check_time_zone(self.tz)


def check_time_zone(name: str) -> str:
    """An IANA time zone name the server can resolve, such as `Europe/Paris`."""
    try:
        if not _SCHEDULE.fullmatch(name) or "." in name:
            raise ValueError
        zoneinfo.ZoneInfo(name)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ValueError(
            f"tz is {quote(name)}: not a time zone name (such as Europe/Paris)"
        ) from None
    return name


class CommandRejected(ValueError):
    """A command that cannot be decoded; the message says which field and why."""


def _decode(data: bytes, kind: type, what: str):
    if len(data) > MAX_COMMAND_BYTES:
        raise CommandRejected(
            f"malformed {what} command: {len(data)} bytes; at most {MAX_COMMAND_BYTES}"
        )
    try:
        command = msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise CommandRejected(f"malformed {what} command: {shorten(str(exc), 300)}") from None
    except msgspec.DecodeError as exc:
        raise CommandRejected(
            f"malformed {what} command: not valid JSON ({shorten(str(exc), 300)})"
        ) from None
    if _holds_nul(msgspec.to_builtins(command)):
        # Nothing downstream can keep it: Postgres text and subjects refuse a NUL.
        raise CommandRejected(f"malformed {what} command: a string holds a NUL character")
    return command


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def decode_run(data: bytes) -> RunCommand:
    return _decode(data, RunCommand, "run")


def decode_deploy(data: bytes) -> DeployCommand:
    return _decode(data, DeployCommand, "deploy")


def decode_cancel(data: bytes) -> CancelCommand:
    return _decode(data, CancelCommand, "cancel")


def decode_job(data: bytes) -> JobCommand:
    return _decode(data, JobCommand, "job")


def decode_promote(data: bytes) -> PromoteCommand:
    return _decode(data, PromoteCommand, "promote")

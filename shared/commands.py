"""Commands other systems publish on `dbt.cmd.<verb>.<project>.<principal>`, and their
strict decoding. `requested_by`, when given, must be the subject's principal.

A run's arguments are one command block whose variant IS the command, so each
variant carries exactly the overrides it takes. Unknown keys are errors: a typo
in an override must not silently build the whole project.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from shared import subjects
from shared.arguments import check_value
from shared.bundle import Skipped
from shared.digests import check_digest
from shared.quote import shorten

__all__ = [
    "BuildCommand",
    "ParseCommand",
    "RetryCommand",
    "RunCommand",
    "DeployCommand",
    "CommandRejected",
    "decode_run",
    "decode_deploy",
    "decode_cancel",
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


def check_selection(field: str, items: list[str]) -> None:
    """A selection item is a dbt selector, never a flag (shared.arguments)."""
    for i, item in enumerate(items):
        check_value(f"{field}[{i}]", item)


class BuildCommand(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="build", tag_field="label"
):
    select: list[str] = []
    exclude: list[str] = []
    vars: dict[str, Any] = {}
    full_refresh: bool = False
    defer: bool | None = None  # None: the descriptor's `defer`
    # A scratch schema the run builds into instead of its profile's (a CI run's); such a
    # run never publishes the environment's state, and a deferral still reads the profile's.
    schema: str | None = None

    def __post_init__(self):
        check_selection("select", self.select)
        check_selection("exclude", self.exclude)
        if self.schema is not None and not SCHEMA.fullmatch(self.schema):
            raise ValueError(
                f"schema {shorten(self.schema, 80)!r} is not a plain schema name: letters,"
                " digits and underscores, at most 63, not starting with a digit"
            )


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


class RunCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.run.<project>`."""

    command: BuildCommand | RetryCommand | ParseCommand
    args: dict[str, Any] = {}
    run_id: str | None = None
    requested_by: Principal = ""
    hidden: bool = False

    def __post_init__(self):
        if self.run_id is not None:
            subjects.check_run_id(self.run_id)
            if DEFAULT_ID.fullmatch(self.run_id):
                raise ValueError(
                    f"run id {self.run_id!r} has the form c<digits>, which names the run of"
                    " the command with that sequence (a run asked for without a run id):"
                    " choose another run id"
                )


# What a deploy may say of the folder it came from (services/deploy_source.py): a few marks.
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

    def __post_init__(self):
        check_digest(self.bundle_digest)
        if self.deploy_id is not None:
            subjects.check_run_id(self.deploy_id)


class CancelCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.cancel.<project>`: the run of that project to stop."""

    run_id: str
    requested_by: Principal = ""

    def __post_init__(self):
        subjects.check_run_id(self.run_id)


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

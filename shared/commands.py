"""Commands other systems publish on `dbt.cmd.<verb>.<project>`, and their strict decoding.

A run's arguments are one command block whose variant IS the command, so each
variant carries exactly the overrides it takes. Unknown keys are errors: a typo
in an override must not silently build the whole project.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.bundle import Skipped

__all__ = [
    "BuildCommand",
    "ParseCommand",
    "RetryCommand",
    "RunCommand",
    "DeployCommand",
    "CommandRejected",
    "decode_run",
    "decode_deploy",
]


class BuildCommand(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="build", tag_field="label"
):
    select: list[str] = []
    exclude: list[str] = []
    vars: dict[str, Any] = {}
    full_refresh: bool = False
    defer: bool | None = None  # None: the descriptor's `defer`


class RetryCommand(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="retry", tag_field="label"
):
    """Resume the named run with `dbt retry`; it must be the run the retry state holds."""

    dbt_retry_job: str


class ParseCommand(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="parse", tag_field="label"
):
    """Parse and store a graph: of a bundle not deployed (its digest, already in the object
    store), or of the deployed version with these vars. Builds nothing."""

    bundle_digest: str | None = None
    vars: dict[str, Any] = {}


class RunCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.run.<project>`."""

    command: BuildCommand | RetryCommand | ParseCommand
    args: dict[str, Any] = {}
    run_id: str | None = None
    requested_by: str = ""
    hidden: bool = False


class DeployCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The body of `dbt.cmd.deploy.<project>`: the bundle is already in the object store."""

    bundle_digest: str
    bundle_size: int
    skipped: list[Skipped] = []
    deploy_id: str | None = None
    requested_by: str = ""


class CommandRejected(ValueError):
    """A command that cannot be decoded; the message says which field and why."""


def _decode(data: bytes, kind: type, what: str):
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise CommandRejected(f"malformed {what} command: {exc}") from None
    except msgspec.DecodeError as exc:
        raise CommandRejected(f"malformed {what} command: not valid JSON ({exc})") from None


def decode_run(data: bytes) -> RunCommand:
    return _decode(data, RunCommand, "run")


def decode_deploy(data: bytes) -> DeployCommand:
    return _decode(data, DeployCommand, "deploy")

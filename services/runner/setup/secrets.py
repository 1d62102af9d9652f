"""Resolving `$env:NAME` and `$var:PATH` references on the runner, and masking what they hold.

References travel in descriptors, warehouse configuration and commands;
resolved values exist only inside the runner process and dbt's environment.
Every value resolved here is remembered so a log line that happens to carry
one is masked before it is published.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from shared.descriptor import reference

__all__ = ["Masker", "Resolver", "UnresolvedReference", "load_variables", "MASK"]

MASK = "****"
# Shorter values (a port, "true") are not worth masking and would garble every line.
MIN_SECRET = 4
# A URL's user info (`https://user:token@index/`): credentials whoever wrote them, known to
# this runner or not (an operator's index or mirror URL in a resolver's message).
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@\"'\\]+@")


class UnresolvedReference(LookupError):
    pass


def load_variables(path: Path | None) -> dict[str, str]:
    """The runner's variable store for `$var:` references (a YAML mapping of path -> value)."""
    if path is None or not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"variables file {path.name} must be a mapping of path to value")
    return {str(k): str(v) for k, v in data.items()}


def _base64_cores(data: bytes) -> set[str]:
    """What base64 (standard and URL-safe) writes for `data` wherever it stands in a longer
    text: for each of the three alignments, the characters that depend on `data` alone."""
    cores = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode()
        start = -(-shift * 4 // 3)  # characters that still carry the padding bytes
        end = ((shift + len(data)) // 3) * 4
        core = encoded[start:end]
        if len(core) >= MIN_SECRET:
            cores |= {core, core.translate(str.maketrans("+/", "-_"))}
    return cores


def _encoded(secret: str) -> set[str]:
    """Encodings that cost nothing to look for: hex, base64, URL-encoding. A defence in
    depth only: the sandbox, not this list, keeps secrets from a project's code."""
    data = secret.encode()
    hexed = binascii.hexlify(data).decode()
    return {hexed, hexed.upper(), urllib.parse.quote(secret, safe=""),
            urllib.parse.quote_plus(secret), *_base64_cores(data)}  # fmt: skip


class Masker:
    """Every secret this runner resolved, in every spelling it may leave in: as is,
    reversed, upper- and lower-cased, each of those as JSON escapes it, and as hex, base64
    and URL-encoded. One instance per runner, applied where anything leaves it (events,
    log lines, logs)."""

    def __init__(self):
        self._spellings: list[str] = []
        self._known: dict[str, set[str]] = {}  # each secret: its spellings

    def add(self, secret: str) -> None:
        if len(secret) < MIN_SECRET or secret in self._known:
            return
        variants = {secret, secret[::-1], secret.upper(), secret.lower()}
        variants |= {json.dumps(v)[1:-1] for v in variants}
        self._known[secret] = variants | _encoded(secret)
        self._spellings = sorted(set(self._spellings) | self._known[secret], key=len, reverse=True)

    def forget(self, secret: str) -> None:
        """Stop looking for a secret that is dead (a run's own credential, once dropped),
        so a long-lived runner's list does not grow with every run."""
        if self._known.pop(secret, None) is not None:
            kept = set().union(*self._known.values())
            self._spellings = sorted(kept, key=len, reverse=True)

    def mask(self, text: str) -> str:
        if "://" in text:
            text = _USERINFO.sub(r"\1***@", text)
        for spelling in self._spellings:
            if spelling in text:
                text = text.replace(spelling, MASK)
        return text

    def mask_bytes(self, data: bytes) -> bytes:
        if not self._spellings and b"://" not in data:
            return data
        text = data.decode("utf-8", errors="surrogateescape")
        masked = self.mask(text)
        return data if masked is text else masked.encode("utf-8", errors="surrogateescape")


def _allowed(name: str, patterns: tuple[str, ...]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


class Resolver:
    """Resolves references for one job; every value it resolves is masked runner-wide.

    A project's own references (its descriptor's `env:`) read only the environment
    names the operator allows (JETDBT_ENV_REFERENCES); the operator's warehouse
    configuration reads any.
    """

    def __init__(
        self,
        variables: dict[str, str] | None = None,
        environ=None,
        masker: Masker | None = None,
        project_env: tuple[str, ...] = (),
    ):
        self.variables = variables or {}
        self.environ = os.environ if environ is None else environ
        self.masker = masker or Masker()
        self.project_env = project_env

    def resolve(self, value: Any, where: str, *, from_project: bool = False) -> Any:
        """A reference's value (remembered for masking); literals and non-strings unchanged."""
        if isinstance(value, dict):
            return {
                k: self.resolve(v, f"{where}.{k}", from_project=from_project)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [
                self.resolve(v, f"{where}[{i}]", from_project=from_project)
                for i, v in enumerate(value)
            ]
        if not isinstance(value, str):
            return value
        ref = reference(value)
        if ref is None:
            return value
        kind, name = ref
        if from_project and not _allowed(name, self.project_env):
            allowed = ", ".join(self.project_env) or "none"
            raise UnresolvedReference(
                f"{where} refers to ${kind}:{name}, which projects may not read; an operator"
                f" allows names with JETDBT_ENV_REFERENCES (allowed now: {allowed})"
            )
        source = self.environ if kind == "env" else self.variables
        if name not in source:
            place = "the runner's environment" if kind == "env" else "the runner's variables"
            raise UnresolvedReference(f"{where} refers to ${kind}:{name}, which {place} lacks")
        resolved = str(source[name])
        self.masker.add(resolved)
        return resolved

    def mask(self, text: str) -> str:
        return self.masker.mask(text)

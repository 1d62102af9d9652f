"""Resolving `$env:NAME` and `$var:PATH` references on the runner, and masking what they hold.

References travel in descriptors, warehouse configuration and commands;
resolved values exist only inside the runner process and dbt's environment.
Every value resolved here is remembered so a log line that happens to carry
one is masked before it is published.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from shared.descriptor import reference

__all__ = ["Resolver", "UnresolvedReference", "load_variables", "MASK"]

MASK = "****"


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


class Resolver:
    def __init__(self, variables: dict[str, str] | None = None, environ=None):
        self.variables = variables or {}
        self.environ = os.environ if environ is None else environ
        self.secrets: set[str] = set()

    def resolve(self, value: Any, where: str) -> Any:
        """A reference's value (remembered for masking); literals and non-strings unchanged."""
        if isinstance(value, dict):
            return {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if not isinstance(value, str):
            return value
        ref = reference(value)
        if ref is None:
            return value
        kind, name = ref
        source = self.environ if kind == "env" else self.variables
        if name not in source:
            place = "the runner's environment" if kind == "env" else "the runner's variables"
            raise UnresolvedReference(f"{where} refers to ${kind}:{name}, which {place} lacks")
        resolved = str(source[name])
        if len(resolved) >= 4:
            self.secrets.add(resolved)
        return resolved

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

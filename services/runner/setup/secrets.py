"""Resolving `$env:NAME` and `$var:PATH` references on the runner, and masking what they hold.

References travel in descriptors, warehouse configuration and commands;
resolved values exist only inside the runner process and dbt's environment.
Every value resolved here is remembered so a log line that happens to carry
one is masked before it is published (services/runner/setup/masking.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from jetdbt.services.runner.setup.masking import Masker
from jetdbt.shared.project.descriptor import reference

__all__ = ["Resolver", "UnresolvedReference", "load_variables"]


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

"""Where a run builds, from the environment it names: that environment's descriptor, the
schema of its own a person's or a pull request's run builds into, and the environment whose
published state its deferral reads.

- An ordinary environment (`prod`, `staging`) builds in its own schema and defers to its own
  state, or to `defer_to`'s.
- A personal one (`dev`) builds into `<schema>__<principal>`, deferring by default to
  `defer_to` (the default environment unless it names another).
- A pull request's check builds into `<schema>__pr_<n>` of the environment it names,
  deferring by default to that environment's state.

A schema of a run's own is the plan's scratch schema, so such a run never publishes an
environment's state. Deferring to another environment needs the same warehouse: dbt reads
the relations it defers to over the run's one connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from jetdbt.services.runner.setup.plan import PlanRefused
from jetdbt.shared.identity.principals import environment_problem
from jetdbt.shared.project import schema_names
from jetdbt.shared.project.descriptor import (
    DEFAULT_ENVIRONMENT,
    Descriptor,
    environment_spec,
    in_environment,
)

__all__ = ["Placement", "Placed", "place"]


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    """What a run names about where it builds: its environment, who runs it (the
    authenticated principal and the role its door gives it) and the pull request it checks."""

    environment: str = DEFAULT_ENVIRONMENT
    principal: str = ""
    pr: int = 0
    role: str = "admin"


@dataclass(frozen=True)
class Placed:
    """The descriptor a run plans with; `home`: the descriptor of the environment its
    deferral reads when that is another one (None: its own); `scratch`: the schema of its
    own, from its environment's schema (None: it builds in that schema)."""

    desc: Descriptor
    home: Descriptor | None = None
    scratch: Callable[[str], str] | None = None


def place(desc: Descriptor, where: Placement | None) -> Placed:
    """Where a run of `desc` named by `where` builds (None: a deploy's parse, in the
    default environment). Raises DescriptorError for an unknown environment, PlanRefused
    for a caller its role keeps out, or a deferral to another warehouse."""
    if where is None:
        return Placed(in_environment(desc, DEFAULT_ENVIRONMENT))
    name = where.environment
    spec = environment_spec(desc, name)
    problem = environment_problem(where.role, name, list(spec.roles))
    if problem is not None:
        raise PlanRefused(problem)
    own = in_environment(desc, name)
    if where.pr:
        return Placed(_defers(own, spec.defer), scratch=_pr_schema(where.pr))
    if spec.personal:
        if not where.principal:
            raise PlanRefused(
                f"environment {name!r} builds into a schema of the caller's own, and this run"
                " names no principal"
            )
        target = spec.defer_to or DEFAULT_ENVIRONMENT
        home = _home(desc, own, name, target)
        return Placed(_defers(own, spec.defer), home, _personal_schema(where.principal))
    if spec.defer_to and spec.defer_to != name:
        return Placed(own, _home(desc, own, name, spec.defer_to))
    return Placed(own)


def _defers(desc: Descriptor, said: bool | None) -> Descriptor:
    """A run in a schema of its own defers unless its environment (or its command) says not."""
    return msgspec.structs.replace(desc, defer=True) if said is None else desc


def _home(desc: Descriptor, own: Descriptor, name: str, target: str) -> Descriptor:
    home = in_environment(desc, target)
    mine, theirs = own.profile.warehouse_name(), home.profile.warehouse_name()
    if mine != theirs:
        raise PlanRefused(
            f"environment {name!r} defers to environment {target!r}, but builds in warehouse"
            f" {mine!r} and {target!r} in {theirs!r}: a deferral reads the other environment's"
            " relations over the run's own connection, so both must be in one warehouse"
        )
    return home


def _pr_schema(pr: int) -> Callable[[str], str]:
    return lambda schema: schema_names.pr_schema(schema, pr)


def _personal_schema(principal: str) -> Callable[[str], str]:
    return lambda schema: schema_names.personal_schema(schema, principal)

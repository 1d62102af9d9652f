"""Which of a manifest's nodes a dbt command reports on, by one rule: the CLI's planned
total and the nodes a cancelled run never reached are counted the same way.

The manifest is read typed, only the few fields the rule needs, so a project of
many thousand nodes costs one pass over its bytes, not a tree of dicts.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

__all__ = ["BUILD", "Planned", "executes", "nodes"]

_TESTS = frozenset({"test", "unit_test"})
BUILD = frozenset({"model", "seed", "snapshot"}) | _TESTS
# The resource types each command runs a node of; a command missing here (show, compile,
# run-operation, docs generate, source freshness) is not planned node by node.
_EXECUTES = {
    "build": BUILD,
    "run": frozenset({"model"}),
    "test": _TESTS,
    "seed": frozenset({"seed"}),
    "snapshot": frozenset({"snapshot"}),
}


class _Config(msgspec.Struct):
    materialized: str | None = None


class Planned(msgspec.Struct, frozen=True):
    """What a manifest says of a node its command runs."""

    resource_type: str = ""
    name: str = ""
    relation: str | None = msgspec.field(default=None, name="relation_name")
    config: _Config = msgspec.field(default_factory=_Config)


class _Manifest(msgspec.Struct):
    nodes: dict[str, Planned] = {}
    unit_tests: dict[str, Planned] = {}


def executes(label: str, test_behavior: str = "build") -> frozenset[str]:
    """The resource types command `label` runs; a build whose test_behavior is none runs
    no test."""
    types = _EXECUTES.get(label, frozenset())
    return types - _TESTS if label == "build" and test_behavior == "none" else types


def nodes(
    manifest: bytes, types: frozenset[str] = BUILD, among: Collection[str] | None = None
) -> dict[str, Planned]:
    """The manifest's nodes of `types` a command reports on, by unique id, and only those
    `among` when a selection resolved to them. Ephemeral models are left out: dbt runs them
    inline, in the models that use them. Raises msgspec.DecodeError for a manifest of
    another shape."""
    parsed = msgspec.json.decode(manifest, type=_Manifest)
    every = {**parsed.nodes, **parsed.unit_tests}
    ids = every if among is None else (uid for uid in among if uid in every)
    return {
        uid: every[uid]
        for uid in ids
        if every[uid].resource_type in types and every[uid].config.materialized != "ephemeral"
    }

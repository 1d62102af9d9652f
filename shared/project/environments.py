"""The environment a run builds in, and its one encoding.

An environment is the warehouse name, the effective target, and the schema and
database that target resolves to. Each part is the user's own string, so the
key is length-prefixed rather than joined on a separator: `prod|analytics` +
`scratch` and `prod` + `analytics|scratch` must not be one key. Messages spell
the environment out with `describe()`, never the encoded key.
"""

from __future__ import annotations

import msgspec

__all__ = ["Environment", "NO_STATE", "is_template"]

# What a deferral refused for want of a published state says: a pull request's check
# (`jetdbt ci`) reads it as "the environment has no state yet" and builds without deferring.
NO_STATE = "no state is published"


def is_template(value: str | None) -> bool:
    """dbt renders both delimiters; jetdbt renders neither, so a templated location is unknown."""
    return bool(value) and ("{{" in value or "{%" in value)


class Environment(msgspec.Struct, frozen=True, kw_only=True):
    warehouse: str
    target: str
    schema: str
    database: str

    def key(self) -> str:
        parts = (self.warehouse, self.target, self.schema, self.database)
        return "|".join(f"{len(p)}:{p}" for p in parts)

    def describe(self) -> str:
        return (
            f"warehouse {self.warehouse!r}, target {self.target!r}, schema {self.schema!r},"
            f" database {self.database!r}"
        )

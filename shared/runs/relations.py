"""The one spelling of a warehouse relation: `dbt://<warehouse>/<schema>/<name>`.

Two projects meet where one's model is the other's source, and an ingestion job
declaring a write meets both, only if all three spell the relation the same way.
So every key is made here: quote characters (" ` [ ]) are stripped from schema and
name, which are then ASCII-lowercased; the warehouse name stays as configured. A
relation outside the target's default database qualifies its schema as
`<database>.<schema>`, so same-named tables in two databases never collapse.
"""

from __future__ import annotations

import msgspec

__all__ = ["Relation", "InvalidRelation", "relation_key", "parse", "normalise", "SCHEME"]

SCHEME = "dbt://"
_UNQUOTE = str.maketrans("", "", '"`[]')
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class InvalidRelation(ValueError):
    """A relation key that cannot name one physical relation."""


class Relation(msgspec.Struct, frozen=True):
    warehouse: str
    schema: str
    name: str

    @property
    def key(self) -> str:
        return f"{SCHEME}{self.warehouse}/{self.schema}/{self.name}"


def _ident(value: str, what: str) -> str:
    out = value.translate(_UNQUOTE).translate(_ASCII_LOWER)
    if not out or "/" in out:
        raise InvalidRelation(f"relation {what} {value!r} is empty or contains '/'")
    return out


def _warehouse(value: str) -> str:
    if not value or "/" in value or value != value.strip():
        raise InvalidRelation(f"warehouse name {value!r} is empty or contains '/' or spaces")
    return value


def relation_key(
    warehouse: str,
    database: str | None,
    schema: str,
    name: str,
    default_database: str | None,
) -> str:
    """The key of one relation; `default_database=None` means the target leaves it implicit,
    so every relation qualifies (assuming one shared database is what would collapse them)."""
    seg = _ident(schema, "schema")
    if database is not None:
        db = _ident(database, "database")
        if default_database is None or db != _ident(default_database, "database"):
            seg = f"{db}.{seg}"
    return Relation(_warehouse(warehouse), seg, _ident(name, "name")).key


def parse(key: str) -> Relation:
    """Read a hand-written or generated key into its canonical parts."""
    if not isinstance(key, str) or not key.startswith(SCHEME):
        raise InvalidRelation(
            f"relation {key!r} must look like {SCHEME}<warehouse>/<schema>/<name>"
        )
    parts = key[len(SCHEME) :].split("/")
    if len(parts) != 3:
        raise InvalidRelation(
            f"relation {key!r} must have exactly three parts: {SCHEME}<warehouse>/<schema>/<name>"
        )
    warehouse, schema, name = parts
    return Relation(_warehouse(warehouse), _ident(schema, "schema"), _ident(name, "name"))


def normalise(key: str) -> str:
    return parse(key).key

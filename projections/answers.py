"""What the read side answers with: the base of every answer Struct, `shaped`, which converts
a body into its Struct, and `Database`, what every query reads through. Each projection's
answers (projections/<name>/answers.py) are the shapes its queries return and the API serves;
every Struct forbids unknown fields, so the API's document says `additionalProperties: false`
and a client may rely on the field list."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

__all__ = ["Answer", "Database", "NextAfter", "NextOffset", "shaped"]

# A query's first argument: the pool (one statement) or a connection a handler holds for
# several reads that must agree.
Database = asyncpg.Pool | asyncpg.Connection


class Answer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The base of every body the API serves from a projection."""


def shaped(schema: type, body: Any) -> Any:
    """`body` (dicts, lists, rows' values, Structs read by attribute) as a `schema`; raises
    msgspec.ValidationError naming the field when the route's body and its shape differ."""
    return msgspec.convert(body, schema, from_attributes=True)


class NextOffset(Answer):
    """The query of the following page."""

    offset: int


class NextAfter(Answer):
    """The query of a graph's following page: the last node id read."""

    after: str

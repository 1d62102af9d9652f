"""The schemas jetdbt names for a run, each spelled here once: a project's own schema on a
warehouse shared by projects, a person's own schema and a pull request's schema.

Each is a plain identifier (letters, digits and '_', at most 63 characters, not starting
with a digit), the same in every warehouse, so no quoting rule of any adapter matters and no
user string can reach another schema through it. A person's or a pull request's schema
joins its environment's schema and its own part with `__`, which a project's schema never
holds: no project's name makes its schema another project's personal or PR schema.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["plain", "project_schema", "personal_schema", "pr_schema"]

MAX_CHARS = 63
JOIN = "__"  # between an environment's schema and a person's or pull request's part
_DIGEST_CHARS = 8


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:_DIGEST_CHARS]


def _lowered(value: str) -> str:
    text = re.sub(r"[^a-z0-9_]", "_", value.lower()) or "_"
    return f"_{text}" if text[0].isdigit() else text


def plain(value: str) -> str:
    """`value` as a plain identifier: lowercase, every other character '_'. A value that is
    not one already keeps a digest of itself, as does one too long, so two names never
    become one schema (`ana.b` and `ana_b`, projects `a-b` and `a_b`)."""
    text = _lowered(value)
    if text == value and len(text) <= MAX_CHARS:
        return text
    return f"{text[: MAX_CHARS - _DIGEST_CHARS - 1]}_{_digest(value)}"


def project_schema(project: str) -> str:
    """A project's schema on a warehouse that gives each project its own: never holding
    `__` nor ending in '_' (a name that would keeps a digest of itself), so it is never
    the start of another schema's `__` join."""
    schema = plain(project)
    if JOIN not in schema and not schema.endswith("_"):
        return schema
    tidy = re.sub(r"_+", "_", _lowered(project))[: MAX_CHARS - _DIGEST_CHARS - 1]
    return f"{tidy.rstrip('_')}_{_digest(project)}"


def _joined(schema: str, part: str) -> str:
    """`<schema>__<part>`; one too long keeps both starts and a digest of the whole."""
    whole = f"{schema}{JOIN}{part}"
    if len(whole) <= MAX_CHARS:
        return whole
    room = MAX_CHARS - len(JOIN) - _DIGEST_CHARS - 1
    head = schema[: room // 2]
    return f"{head}{JOIN}{part[: room - len(head)]}_{_digest(whole)}"


def personal_schema(schema: str, principal: str) -> str:
    """One person's schema of an environment whose schema is `schema`. A principal whose
    name reads as a pull request's part keeps a digest of itself: it is not that PR's."""
    part = plain(principal)
    if re.fullmatch(r"pr_\d+", part):
        part = f"{part}_{_digest(principal)}"
    return _joined(schema, part)


def pr_schema(schema: str, pr: int) -> str:
    """A pull request's schema beside an environment whose schema is `schema`."""
    return _joined(schema, f"pr_{pr}")

"""The schemas jetdbt names for a run, each spelled here once: a project's own schema on a
warehouse shared by projects, a person's own schema and a pull request's schema.

Each is a plain identifier (letters, digits and '_', at most 63 characters, not starting
with a digit), the same in every warehouse, so no quoting rule of any adapter matters and no
user string can reach another schema through it.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["plain", "project_schema", "personal_schema", "pr_schema"]

MAX_CHARS = 63


def plain(value: str) -> str:
    """`value` as a plain identifier: lowercase, every other character '_'. A value that is
    not one already keeps a digest of itself, as does one too long, so two names never
    become one schema (`ana.b` and `ana_b`, projects `a-b` and `a_b`)."""
    text = re.sub(r"[^a-z0-9_]", "_", value.lower()) or "_"
    if text[0].isdigit():
        text = f"_{text}"
    if text == value and len(text) <= MAX_CHARS:
        return text
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{text[: MAX_CHARS - 9]}_{digest}"


def project_schema(project: str) -> str:
    """A project's schema on a warehouse that gives each project its own."""
    return plain(project)


def personal_schema(schema: str, principal: str) -> str:
    """One person's schema of an environment whose schema is `schema`."""
    return plain(f"{schema}_{principal}")


def pr_schema(schema: str, pr: int) -> str:
    """A pull request's schema beside an environment whose schema is `schema`."""
    return plain(f"{schema}_pr_{pr}")

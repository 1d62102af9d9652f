"""What an agent reads to use jetdbt: the security model and access rules (docs/security.md),
the section on agents (docs/guide.md), and the descriptor's keys, generated from
`shared/project/descriptor.py`.

Sections are read from the docs beside the code at each read, so they are what the docs
say today; the descriptor's keys come from the Struct `jetdbt.yaml` is decoded
into, with each key's type, default and allowed values, and its JSON Schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import msgspec
from jetdbt.shared.project import descriptor

__all__ = ["RESOURCES", "Resource", "DOCS", "doc_section", "descriptor_doc"]

DOCS = Path(__file__).resolve().parents[2] / "docs"


class Resource(NamedTuple):
    name: str
    description: str
    text: Callable[[], str]
    mime_type: str = "text/markdown"


def doc_section(name: str, *headings: str) -> str:
    """docs/`name`'s `## heading` sections, each up to the next `## `, in the order given."""
    path = DOCS / name
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise LookupError(
            f"the docs are not beside this installation ({path}: {exc.strerror})"
        ) from None
    parts = []
    for heading in headings:
        start = lines.index(f"## {heading}")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
        parts.append("\n".join(lines[start:end]).strip())
    return "\n\n".join(parts) + "\n"


def _kind(schema: dict, defs: dict) -> str:
    """A key's type in words, from its JSON Schema."""
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[-1]
        keys = ", ".join(f"`{k}`" for k in defs[target]["properties"])
        return f"a mapping of {keys}"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_kind(s, defs) for s in schema["anyOf"])
    kind = schema.get("type", "any value")
    if kind == "array":
        return f"a list of {_kind(schema.get('items', {}), defs)}"
    if kind == "object":
        return f"a mapping to {_kind(schema.get('additionalProperties', {}), defs)}"
    bounds = [f"{word} {schema[k]}" for k, word in (("minimum", "at least"), ("maximum", "at most"))
              if k in schema]  # fmt: skip
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _refs(schema: dict) -> list[str]:
    """The definitions a key's schema names (a nested mapping, or one that may be null)."""
    found = [schema["$ref"]] if "$ref" in schema else []
    found += [s["$ref"] for s in schema.get("anyOf", []) if "$ref" in s]
    return [ref.rsplit("/", 1)[-1] for ref in found]


def _keys(name: str, defs: dict, prefix: str = "") -> list[str]:
    lines = []
    for key, schema in defs[name]["properties"].items():
        default = json.dumps(schema.get("default"))
        lines.append(f"- `{prefix}{key}`: {_kind(schema, defs)}; default `{default}`")
        for nested in _refs(schema):
            lines += _keys(nested, defs, f"{prefix}{key}.")
    return lines


def descriptor_doc() -> str:
    """Every key of `jetdbt.yaml` (nested ones dotted), then the JSON Schema it is checked by."""
    schema = msgspec.json.schema(descriptor.Descriptor)
    root = schema["$ref"].rsplit("/", 1)[-1]
    return "\n".join(
        [
            f"# `{descriptor.FILENAME}` keys",
            "",
            f"Every key `{descriptor.FILENAME}` may hold; any other key is refused, naming it.",
            "",
            *_keys(root, schema["$defs"]),
            "",
            "## JSON Schema",
            "",
            "```json",
            json.dumps(schema, indent=2),
            "```",
            "",
            doc_section("guide.md", "The descriptor: `jetdbt.yaml` (optional)"),
        ]
    )


RESOURCES = {
    "jetdbt://docs/security-model": Resource(
        "security-model",
        "Who may ask for what (tokens, roles, teams), and what a command and a project can"
        " and cannot do: the Security model and Access sections of docs/security.md.",
        lambda: doc_section("security.md", "Security model", "Access"),
    ),
    "jetdbt://docs/agents": Resource(
        "agents",
        "How an agent uses jetdbt over MCP: the tools, the roles, following a run.",
        lambda: doc_section("guide.md", "AI agents (MCP)"),
    ),
    "jetdbt://docs/descriptor": Resource(
        "descriptor",
        "The keys of a project's jetdbt.yaml (engine, profile, selection, vars, retries...),"
        " generated from the Struct it is decoded into.",
        descriptor_doc,
    ),
}

"""The route table of docs/api.md, generated from the OpenAPI document the API serves (its
routes as registered, `OPERATIONS`' summaries, each route's role as `auth.route_role`
decides it): `python -m jetdbt.services.api.route_table` writes it again, and
tests/test_docs_tables.py fails while it is stale."""

from __future__ import annotations

from pathlib import Path

from jetdbt.services.api.app import create_app
from jetdbt.services.api.auth import PUBLIC, route_role
from jetdbt.services.api.openapi import document
from jetdbt.shared.process.config import generated

__all__ = ["API_DOC", "route_table"]

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def route_table() -> str:
    """Every route of the OpenAPI document, in its order: method and path, role, summary."""
    rows = ["| route | role | what |", "|---|---|---|"]
    for path, operations in document(create_app())["paths"].items():
        for method, operation in operations.items():
            role = "none" if path in PUBLIC else route_role(method.upper(), path)
            rows.append(f"| `{method.upper()} {path}` | {role} | {operation['summary']} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    API_DOC.write_text(generated(API_DOC.read_text(), "routes", route_table()))

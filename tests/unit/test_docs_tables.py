"""docs/api.md's route table is the one the API's OpenAPI document gives (its routes as
registered, their summaries and roles): stale, it fails here. No server is started."""

from __future__ import annotations

from jetdbt.services.api import route_table
from jetdbt.services.api.app import create_app
from jetdbt.services.api.openapi import document
from jetdbt.shared.process.config import generated


def test_the_route_table_in_the_api_doc_is_current():
    text = route_table.API_DOC.read_text()
    assert generated(text, "routes", route_table.route_table()) == text, (
        "docs/api.md's route table is stale: `.venv/bin/python -m jetdbt.services.api.route_table`"
        " writes it again"
    )


def test_the_route_table_lists_every_route_the_api_registers():
    table = route_table.route_table()
    for path, operations in document(create_app())["paths"].items():
        for method in operations:
            assert f"| `{method.upper()} {path}` |" in table, (method, path)
    assert "| `POST /v1/runs/{run_id}/cancel` | runner |" in table
    assert "| `GET /healthz` | none |" in table

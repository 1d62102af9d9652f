"""The OpenAPI document as the repository keeps it (`openapi.json` at its top): `python -m
jetdbt.services.api.openapi_file` writes it again, and tests/stack/test_openapi.py checks it is
current. Apart from services/api/openapi.py, which the app imports to serve the document."""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp import web
from jetdbt.services.api.app import create_app
from jetdbt.services.api.openapi import document

__all__ = ["COMMITTED", "committed_text"]

COMMITTED = Path(__file__).resolve().parents[2] / "openapi.json"


def committed_text(app: web.Application) -> str:
    """The document of `app` as the repository keeps it: indented, keys sorted (a set of
    shapes has no order of its own), one trailing newline."""
    return json.dumps(document(app), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


if __name__ == "__main__":
    COMMITTED.write_text(committed_text(create_app()))

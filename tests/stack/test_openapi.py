"""The published contract: /openapi.json is valid OpenAPI 3.1, and the live API keeps it.

The contract test runs schemathesis against a real stack holding a few runs (published
as a runner would) with the stack's admin token: generated requests on every described
route, no 5xx, every status documented, every body the shape the document gives.
JETDBT_CONTRACT_EXAMPLES raises the example count (the suite keeps it small).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import msgspec
from jetdbt.services.api import openapi, openapi_file, schemas
from jetdbt.shared.identity import principals
from openapi_spec_validator import validate

from tests.support import synthetic

EXAMPLES = int(os.environ.get("JETDBT_CONTRACT_EXAMPLES", "10"))
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


async def _admin(stack) -> dict[str, str]:
    _, bearer = await principals.create_token(
        stack.bus, principal="contract", team="ops", role="admin"
    )
    return {"Authorization": f"Bearer {bearer}"}


def test_the_document_is_openapi_3_1_and_every_shape_is_a_route_body():
    doc = openapi.document()
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    # A body that is a document of dbt's (an artifact) is an object, not a Struct of ours.
    structs = [op.body for op in openapi.OPERATIONS if isinstance(op.body, type)]
    described = {schemas.ApiError, *structs}
    assert {t.__name__ for t in described} <= set(doc["components"]["schemas"])
    run = doc["components"]["schemas"]["Run"]
    assert run["additionalProperties"] is False and "nodes" in run["required"]
    for op in openapi.OPERATIONS:
        answers = doc["paths"][op.path][op.method.lower()]["responses"]
        assert "500" in answers, op.path


def test_a_changed_body_is_refused_by_its_shape():
    """What makes the contract hold: a route whose body drifts from its Struct fails loudly."""
    good = {"ok": True, "nats": True, "problems": []}
    assert schemas.shaped(schemas.Health, good) == schemas.Health(ok=True, nats=True, problems=[])
    for drifted in ({**good, "extra": 1}, {"ok": True, "nats": True}, {**good, "ok": "yes"}):
        try:
            schemas.shaped(schemas.Health, drifted)
        except msgspec.ValidationError:
            continue
        raise AssertionError(f"{drifted} passed as a Health")


async def test_the_live_api_keeps_its_contract(stack, tmp_path):
    headers = await _admin(stack)
    await synthetic.publish(stack.bus, synthetic.log(3, project="synth"))
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{stack.api_url}/openapi.json") as resp:
            assert resp.status == 200
            doc = await resp.json()
        async with session.get(f"{stack.api_url}/docs") as resp:
            assert resp.status == 200 and "/v1/runs/{run_id}" in await resp.text()
    validate(doc)
    assert doc == json.loads(openapi_file.COMMITTED.read_text()), (
        "the served document is not the committed one"
    )
    # The generator also tries the runs that exist, not only random ids that are 404s.
    examples = {
        "project": "synth",
        "run_id": "r1",
        "key": "dbt://main/main/m1",
        "unique_id": "model.synth.m1",
    }
    for ops in doc["paths"].values():
        for op in ops.values():
            for param in op.get("parameters", []):
                if param["name"] in examples:
                    param["examples"] = {"seeded": {"value": examples[param["name"]]}}
    location = tmp_path / "openapi.json"
    location.write_text(json.dumps(doc))
    checks = (
        "not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance"
    )
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            str(SCHEMATHESIS),
            "run",
            str(location),
            "--url",
            stack.api_url,
            "--header",
            f"Authorization: {headers['Authorization']}",
            "--checks",
            checks,
            "--max-examples",
            str(EXAMPLES),
            "--phases",
            "examples,coverage,fuzzing",
            "--workers",
            "1",
            "--request-timeout",
            "20",
            "--suppress-health-check",
            "all",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_every_route_has_a_published_shape():
    """A route added without an entry in OPERATIONS would be listed bare: it must not be."""
    from jetdbt.services.api.app import create_app

    doc = openapi.document(create_app())
    bare = [
        f"{method.upper()} {path}"
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if op["summary"] == openapi.UNDESCRIBED
    ]
    assert bare == [], f"add these to services/api/openapi.py OPERATIONS: {bare}"


def test_the_committed_document_is_the_served_one():
    """openapi.json in the repository is what /openapi.json serves: an API change is a diff."""
    from jetdbt.services.api.app import create_app

    served = openapi_file.committed_text(create_app())
    assert openapi_file.COMMITTED.read_text() == served, (
        "the API's document changed: run `python -m jetdbt.services.api.openapi_file`"
        " and review the diff"
        " of openapi.json"
    )

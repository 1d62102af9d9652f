"""Cloud adapters run contained: real dbt-snowflake and dbt-bigquery, provisioned as users
get them, reach their clouds only through the egress gate, with the sandbox on, real NATS
and Postgres.

A loopback stand-in (tests/support/standin.py) is what JETDBT_EGRESS_HOSTS_FILE maps the
clouds' names to; the runner trusts its certificate as an operator trusts a private
endpoint's (REQUESTS_CA_BUNDLE, which dbt is handed), so TLS completes and the stand-in
reads what the adapter sends. For Snowflake it answers the login and every statement (an
empty result with the columns dbt's listing reads), so a view model builds: the whole
session, statements on one kept connection, went through the gate. For BigQuery it refuses
the service account's OAuth grant as Google would (answering the jobs API well enough to
build would mean a fake of several of its resources), so that run fails with the adapter's
own error.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess

import msgspec
import pytest
from jetdbt.services.cli import client
from jetdbt.services.stack.composition import Stack
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.helpers import collect_everything, deploy_and_wait, run_log, write_files
from tests.support.standin import Answer, StandIn

pytestmark = pytest.mark.dbt

ACCOUNT_HOST = "jetdbt-test.snowflakecomputing.com"
OAUTH_HOST = "oauth2.googleapis.com"
_OK = {"success": True, "code": None, "message": None}
_SESSION = {"token": "standin-token", "masterToken": "standin-master", "sessionId": 1,
            "validityInSeconds": 3600, "masterValidityInSeconds": 14400, "parameters": [],
            "sessionInfo": {"databaseName": "ANALYTICS", "schemaName": "MARTS",
                            "warehouseName": "COMPUTE_WH", "roleName": "DBT"}}  # fmt: skip
# The columns dbt-snowflake reads of `show objects` and `show user functions`, all empty.
_COLUMNS = ("database_name", "schema_name", "name", "kind", "is_dynamic", "is_iceberg",
            "catalog_name", "is_builtin")  # fmt: skip
_RESULT = {"rowtype": [{"name": c, "type": "text", "nullable": True, "length": 255,
                        "byteLength": 1020, "precision": None, "scale": None} for c in _COLUMNS],
           "rowset": [], "total": 0, "returned": 0, "queryId": "standin",
           "queryResultFormat": "json", "parameters": []}  # fmt: skip
ANSWERS = {
    "/session/v1/login-request": Answer(200, {**_OK, "data": _SESSION}),
    "/queries/v1/query-request": Answer(200, {**_OK, "data": _RESULT}),
    "/session": Answer(200, _OK),  # its logout
    "/token": Answer(
        400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
    ),
}
NAMES = ("snow", "bq")  # each a warehouse and the project that builds on it
PROJECT = {
    "dbt_project.yml": "name: cloud\nversion: '1.0'\nconfig-version: 2\nprofile: cloud\n",
    "models/first.sql": "select 1 as id",
}


def _service_account(key_ref: str) -> dict:
    """A service-account keyfile as Google issues one; its key is a `$env:` reference."""
    return {
        "type": "service_account",
        "project_id": "jetdbt-test",
        "private_key_id": "standin",
        "private_key": key_ref,
        "client_email": "dbt@jetdbt-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"https://{OAUTH_HOST}/token",
    }


def _rsa_key() -> str:
    return subprocess.run(
        ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.fixture
def standin(tmp_path):
    server = StandIn(tmp_path, (ACCOUNT_HOST, OAUTH_HOST), ANSWERS)
    yield server
    server.close()


async def test_snowflake_and_bigquery_log_in_through_the_gate_to_their_stand_ins(
    settings, tmp_path, standin, monkeypatch
):
    password, key = secrets.token_hex(16), _rsa_key()
    monkeypatch.setenv("JETDBT_TEST_SF_PASSWORD", password)
    monkeypatch.setenv("JETDBT_TEST_SA_KEY", key)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(standin.certificate))
    hosts = tmp_path / "egress-hosts"
    hosts.write_text(f"# the clouds' names, for this test\n{standin.hosts_line()}")
    snowflake = {"account": "jetdbt-test", "user": "ana", "database": "analytics",
                 "password": "$env:JETDBT_TEST_SF_PASSWORD", "warehouse": "compute_wh",
                 "schema": "marts", "login_timeout": 5, "connect_retries": 0}  # fmt: skip
    bigquery = {"project": "jetdbt-test", "dataset": "marts", "method": "service-account-json",
                "keyfile_json": _service_account("$env:JETDBT_TEST_SA_KEY"), "job_retries": 0,
                "job_execution_timeout_seconds": 10}  # fmt: skip
    warehouses = tmp_path / "warehouses.yaml"
    warehouses.write_text(
        msgspec.json.encode(
            {"snow": {"type": "snowflake", "connection": snowflake},
             "bq": {"type": "bigquery", "connection": bigquery}}
        ).decode()
    )  # fmt: skip
    for name in NAMES:
        write_files(tmp_path / name, {**PROJECT, "jetdbt.yaml": f"profile:\n  warehouse: {name}\n"})
    changed = msgspec.structs.replace(settings, warehouses_file=warehouses, egress_hosts_file=hosts)
    stack = await Stack(changed).start()
    try:
        await asyncio.gather(*(deploy_and_wait(stack.bus, tmp_path / n, n) for n in NAMES))
        build = RunCommand(command=BuildCommand())
        snow, bq = await asyncio.gather(*(client.run(stack.bus, n, build) for n in NAMES))
        logs = [await run_log(stack, final.run_id) for final in (snow, bq)]
        found = await collect_everything(stack)
    finally:
        await stack.stop()

    assert isinstance(snow, ev.RunFinished) and snow.result.status == "passed", snow
    statements = [
        msgspec.json.decode(r.body)["sqlText"]
        for r in standin.requests_to(ACCOUNT_HOST)
        if r.path == "/queries/v1/query-request"
    ]
    assert any("create or replace" in s and "view analytics.marts.first" in s for s in statements)
    assert isinstance(bq, ev.RunFinished) and bq.result.status == "failed", bq
    assert "invalid_grant: Invalid JWT Signature." in bq.result.error, bq.result.error
    assert [r.line for r in standin.requests_to(OAUTH_HOST)] == ["POST /token HTTP/1.1"]
    for text in logs:
        assert "refused" not in text and "jetdbt sandbox:" not in text, text[-2000:]
    for secret in (password, key.splitlines()[1]):
        assert not [b[:200] for b in found if secret.encode() in b]

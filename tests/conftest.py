"""Real servers for every test: a fresh nats-server per test, one Postgres per session.

DATABASE_URL, when set, is used instead of an embedded Postgres (each test gets
its own schema either way). NATS always starts fresh per test: streams are
fixed names and the event stream denies purge, so tests cannot share one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pytest
from jetdbt.services.runner.process import spawn
from jetdbt.services.stack.composition import Stack
from jetdbt.services.stack.embedded import NatsServer, start_postgres
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import load

from tests.support.events_seen import Events
from tests.support.helpers import use_token
from tests.support.paths import EXAMPLE

jlog.configure("warning")
# The stacks tests start record themselves here, not among the user's own running stacks
# (services/stack/stack_file.py): a CLI a person runs meanwhile must not find a test's stack.
os.environ.setdefault("JETDBT_STACKS_DIR", tempfile.mkdtemp(prefix="jetdbt-test-stacks-"))


@pytest.fixture(autouse=True)
def _dbt_only_when_marked(request, monkeypatch):
    """`make test-fast` leaves out tests marked `dbt`; a test that starts dbt without the
    mark fails here, so the mark cannot drift from what a test does."""
    if request.node.get_closest_marker("dbt") is not None:
        yield
        return
    started: list[str] = []
    message = f"{request.node.nodeid} starts dbt: mark it @pytest.mark.dbt"

    async def refuse(*args, **kwargs):
        started.append(message)
        raise AssertionError(message)

    monkeypatch.setattr(spawn, "spawn", refuse)
    yield
    assert not started, message


@pytest.fixture(autouse=True)
def _stacks_send_their_token(monkeypatch):
    """Every Stack a test starts answers only with a token: its bootstrapped admin token is
    recorded for its API URL, so the helpers' HTTP calls send it."""
    start = Stack.start

    async def start_and_record(self):
        started = await start(self)
        if started.api_url:
            use_token(started.api_url, started.admin_token)
        return started

    monkeypatch.setattr(Stack, "start", start_and_record)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory):
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    server, url = start_postgres(tmp_path_factory.mktemp("pg") / "data")
    yield url
    server.cleanup()


@pytest.fixture(scope="session")
def warehouse_pg_url(tmp_path_factory):
    """A Postgres server of its own for warehouses: a runner refuses a warehouse on the server
    jetdbt keeps its projections on (services/runner/setup/own_database.py)."""
    server, url = start_postgres(tmp_path_factory.mktemp("warehouse-pg") / "data")
    yield url
    server.cleanup()


@pytest.fixture
def nats_server(tmp_path):
    server = NatsServer(tmp_path / "nats").start()
    yield server
    server.stop()


@pytest.fixture
def nats_url(nats_server):
    return nats_server.url


@pytest.fixture(scope="session")
def environments_cache(tmp_path_factory):
    """Engine environments provisioned once for the whole suite: with xdist, in the run's
    folder above each worker's (a file lock makes concurrent first uses install once)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "environments"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def settings(tmp_path, nats_url, pg_url, environments_cache):
    # Runs may read the test's folder (a gate's release file lies there; JETDBT_HOME inside
    # it stays hidden), as their sandbox uid.
    tmp_path.chmod(0o755)
    return load(
        {
            "JETDBT_SANDBOX_READ": str(tmp_path),
            "JETDBT_HOME": str(tmp_path / "home"),
            "NATS_URL": nats_url,
            "DATABASE_URL": pg_url,
            "JETDBT_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            "JETDBT_API_PORT": "0",
            "JETDBT_ENVIRONMENTS_DIR": str(environments_cache),
            # Schedule tests count fires seconds apart; test_fair_capacity.py keeps its own.
            "SCHEDULE_MIN_INTERVAL_SECONDS": "1",
        }
    )


@pytest.fixture
async def stack(settings):
    st = await Stack(settings).start()
    yield st
    await st.stop()


@pytest.fixture
def project_copy(tmp_path):
    """A writable copy of the example project, for tests that change it."""
    dest = tmp_path / "jaffle_shop"
    shutil.copytree(EXAMPLE, dest)
    return dest


@pytest.fixture
async def events(stack):
    """Every event on dbt.evt.>, collected from before the test's first command."""
    collected = Events()
    sub = await stack.bus.nc.subscribe("dbt.evt.>", cb=collected.on_msg)
    yield collected
    await sub.unsubscribe()

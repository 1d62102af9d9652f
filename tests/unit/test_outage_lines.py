"""A transient outage (NATS timing out, Postgres restarting) is one log line per retry
saying what is retried and why; a traceback is kept for a bug."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import asyncpg
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process import supervise
from nats import errors as nats_errors


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_loop_s_outage_is_one_line_and_a_bug_keeps_its_traceback():
    stream = io.StringIO()
    jlog.configure("info", stream=stream)
    failures = [nats_errors.TimeoutError(), asyncpg.exceptions.CannotConnectNowError("starting"),
                KeyError("bug")]  # fmt: skip
    stop = asyncio.Event()

    async def run_once(stop: asyncio.Event) -> None:
        if not failures:
            stop.set()
            return
        raise failures.pop(0)

    supervise.RETRY_SECONDS, before = 0.01, supervise.RETRY_SECONDS
    try:
        asyncio.run(supervise.forever(run_once, stop, jlog.get("t"), "loop_failed"))
    finally:
        supervise.RETRY_SECONDS = before
    timeout, restart, bug = _lines(stream)
    assert timeout["cause"] == "TimeoutError: nats: timeout" and "exception" not in timeout
    assert timeout["level"] == "warning" and timeout["event"] == "loop_failed"
    assert restart["cause"] == "CannotConnectNowError: starting" and "exception" not in restart
    assert bug["level"] == "error" and "KeyError: 'bug'" in bug["exception"]


def test_asyncpg_s_pool_retrying_is_one_line_without_its_traceback():
    stream = io.StringIO()
    jlog.configure("info", stream=stream)
    pool = logging.getLogger("asyncpg.pool")
    for failure in (ConnectionRefusedError(111, "Connect call failed"), ValueError("bug")):
        try:
            raise failure
        except Exception:
            pool.warning("Failed to restore the pool connection floor; retrying", exc_info=True)
    refused, bug = _lines(stream)
    assert refused["cause"] == "ConnectionRefusedError: [Errno 111] Connect call failed"
    assert "exception" not in refused and len(stream.getvalue().splitlines()) == 2
    assert "Traceback" in bug["exception"] and "ValueError: bug" in bug["exception"]

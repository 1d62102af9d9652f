"""What NATS and Postgres raise while they are away, restarting or busy for now: the
weather, not a bug. One list, so a retried publish, a supervised loop and a library's log
line agree on what an outage is."""

from __future__ import annotations

import asyncpg
from nats import errors as nats_errors
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

__all__ = ["TRANSIENT", "OUTAGES", "outage"]

# Errors that mean "the server is away or busy for now", not "this publish is wrong".
TRANSIENT = (
    nats_errors.TimeoutError,
    nats_errors.NoRespondersError,
    nats_errors.ConnectionReconnectingError,
    nats_errors.OutboundBufferLimitError,
    nats_errors.StaleConnectionError,
    NoStreamResponseError,
    ServiceUnavailableError,
)
# What a long-running loop meets while NATS or Postgres is away.
OUTAGES = (
    *TRANSIENT,
    nats_errors.ConnectionClosedError,
    nats_errors.NoServersError,
    asyncpg.PostgresConnectionError,  # the connection is gone, or could not be made
    asyncpg.exceptions.OperatorInterventionError,  # a restart: shutting down, starting up
    asyncpg.exceptions.TransactionRollbackError,  # a deadlock or serialization failure
    asyncpg.exceptions.InsufficientResourcesError,  # too many connections, a full disk
    ConnectionError,
    TimeoutError,
)


def outage(exc: BaseException) -> str | None:
    """What an outage says, in a line (`TimeoutError: nats: timeout`); None for a bug."""
    if not isinstance(exc, OUTAGES):
        return None
    return f"{exc.__class__.__name__}: {exc}".rstrip(": ")

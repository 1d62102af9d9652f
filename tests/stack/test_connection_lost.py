"""A command line waiting on a command's events, when NATS goes away for good (the stack
stopped, or came back on another address): it ends, saying so, instead of waiting forever."""

from __future__ import annotations

import asyncio
import time

import pytest
from jetdbt.services.cli import client
from jetdbt.shared.bus.commands import BuildCommand, RunCommand
from jetdbt.shared.bus.connection import ConnectionLost, connect


async def test_a_run_followed_from_the_cli_ends_when_its_nats_server_is_gone(nats_server):
    bus = await connect(nats_server.url, "jetdbt-cli")  # the CLI's: no reconnecting forever
    try:
        following = asyncio.create_task(
            client.run(bus, "shop", RunCommand(command=BuildCommand(), run_id="gone1"))
        )
        await asyncio.sleep(1)  # stored, and waited on: no runner takes it here
        assert not following.done()
        nats_server.stop()
        stopped = time.monotonic()
        with pytest.raises(ConnectionLost, match="was lost and did not come back"):
            await asyncio.wait_for(following, 60)
        assert time.monotonic() - stopped < 30
    finally:
        await bus.close()

"""`jetdbt run` waits with a limit and says what it was waiting for."""

from __future__ import annotations

from jetdbt.services.stack.composition import Stack

from tests.support.helpers import jetdbt


async def test_run_stops_waiting_at_its_limit_and_names_the_run(settings):
    stack = await Stack(settings, runner=False).start()  # nobody will run it
    try:
        done = await jetdbt(stack, "run", "waiting", "--run-id", "w1", "--timeout", "2")
    finally:
        await stack.stop()
    assert done.returncode != 0
    assert "gave up waiting after 2s for run w1 of project 'waiting' to end" in done.stderr
    assert "jetdbt status RUN_ID" in done.stderr

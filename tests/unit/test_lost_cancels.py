"""A loop beside a block, or reading dbt's output, ends when it is cancelled even when the
cancel is lost, as it is on Python 3.11 when it lands while `wait_for` (which nats-py's
requests use) gets its answer."""

from __future__ import annotations

import asyncio

from jetdbt.shared.process import supervise


async def test_a_loop_whose_cancel_is_lost_still_ends_with_its_block():
    answers: list[asyncio.Future] = []
    rounds = 0

    async def loop(stop: asyncio.Event) -> None:
        nonlocal rounds
        while not stop.is_set():
            rounds += 1
            answer = asyncio.get_running_loop().create_future()
            answers.append(answer)
            await asyncio.wait_for(answer, 5)  # a request, answered as the cancel lands

    async with asyncio.timeout(3):
        async with supervise.alongside(loop) as task:
            while not answers:
                await asyncio.sleep(0)
            answers[-1].set_result("ack")  # answered as the block ends and cancels it
    assert task.done() and rounds == 1


async def test_a_cancel_lost_in_a_request_is_raised_after_it():
    answer = asyncio.get_running_loop().create_future()
    after: list[str] = []

    async def publishing() -> None:
        await asyncio.wait_for(answer, 5)
        after.append("answered")
        supervise.cancel_lost()
        after.append("went on")

    task = asyncio.create_task(publishing())
    await asyncio.sleep(0)
    answer.set_result("ack")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and after == ["answered"]

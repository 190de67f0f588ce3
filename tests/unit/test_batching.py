import asyncio

import pytest

from mtad.base.batching import Batcher


async def test_concurrent_items_share_flushes_and_get_their_own_results() -> None:
    calls: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        calls.append(items)
        await asyncio.sleep(0)  # the write is under way: others arrive
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(flush, max_batch=4)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
    assert results == [i * 10 for i in range(10)]
    assert calls[0] == [0]  # a lone first item is written at once
    assert sum(len(c) for c in calls) == 10
    assert len(calls) < 10
    assert max(len(c) for c in calls) <= 4


async def test_a_failed_flush_fails_its_items_only() -> None:
    async def flush(items: list[int]) -> list[int]:
        if 3 in items:
            raise ValueError("boom")
        return items

    batcher: Batcher[int, int] = Batcher(flush, max_batch=1)
    outcomes = await asyncio.gather(*(batcher.submit(i) for i in range(5)), return_exceptions=True)
    assert [type(o).__name__ if isinstance(o, Exception) else o for o in outcomes] == [0, 1, 2, "ValueError", 4]


async def test_nothing_waits_forever_after_a_cancelled_leader() -> None:
    started = asyncio.Event()

    async def flush(items: list[int]) -> list[int]:
        started.set()
        await asyncio.Event().wait()  # never returns
        return items

    batcher: Batcher[int, int] = Batcher(flush)
    leader = asyncio.ensure_future(batcher.submit(1))
    await started.wait()
    follower = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    with pytest.raises(asyncio.CancelledError):
        await follower


async def test_a_batch_holds_at_most_max_batch_by_weight_and_at_least_one_item() -> None:
    calls: list[list[list[int]]] = []
    gate = asyncio.Event()

    async def flush(items: list[list[int]]) -> list[int]:
        calls.append(items)
        await gate.wait()
        return [len(i) for i in items]

    batcher: Batcher[list[int], int] = Batcher(flush, max_batch=10, weight=len)
    items = [[0], [1] * 4, [2] * 5, [3] * 2, [4] * 30, [5], [6]]
    submitted = [asyncio.ensure_future(batcher.submit(item)) for item in items]
    await asyncio.sleep(0)  # the first is being written; the others wait
    gate.set()
    assert await asyncio.gather(*submitted) == [1, 4, 5, 2, 30, 1, 1]
    assert [[len(i) for i in call] for call in calls] == [[1], [4, 5], [2], [30], [1, 1]]

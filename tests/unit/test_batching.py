import asyncio

import pytest

from mtad.batching import Batcher


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

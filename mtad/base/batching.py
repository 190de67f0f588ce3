"""Batching of concurrent writes: many callers, one statement.

Callers `submit()` an item and wait for its result. The first caller to find no
flush under way becomes the leader: it flushes everything pending in one call of
`flush(items)`, then whatever arrived meanwhile, until nothing is pending. No
timer and no background task: a lone item is written at once, and under load
batches grow by themselves while the previous one is being written, up to
`max_batch` (counted in items, or in what `weight` says an item weighs: rows).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    def __init__(
        self,
        flush: Callable[[list[Item]], Awaitable[Sequence[Result]]],
        *,
        max_batch: int = 500,
        weight: Callable[[Item], int] | None = None,
    ) -> None:
        self._flush = flush
        self._max = max_batch
        self._weight = weight
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._flushing = False
        self.batches = 0
        self.items = 0

    async def submit(self, item: Item) -> Result:
        """The item's result once its batch is written; the flush's exception if it failed."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if not self._flushing:
            self._flushing = True
            try:
                await self._drain()
            finally:
                self._flushing = False
        return await future

    def _take(self) -> list[tuple[Item, asyncio.Future[Result]]]:
        """The next batch: as many pending items as fit in max_batch (at least one)."""
        count = self._max
        if self._weight is not None:
            count, total = 0, 0
            for item, _ in self._pending:
                total += self._weight(item)
                if count and total > self._max:
                    break
                count += 1
        batch, self._pending = self._pending[:count], self._pending[count:]
        return batch

    async def _drain(self) -> None:
        while self._pending:
            batch = self._take()
            try:
                results = await self._flush([item for item, _ in batch])
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
                if not isinstance(exc, Exception):  # cancelled: the others get a chance to lead
                    for _, future in self._pending:
                        future.set_exception(asyncio.CancelledError())
                    self._pending = []
                    raise
                continue
            self.batches += 1
            self.items += len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

"""A ready queue: priority first, then fair turns among tenants, then age.

The jobs waiting for one provider group's bucket. The highest priority present
always goes first, so a password reset never waits behind a newsletter. Among
the tenants that have jobs at that priority, turns go round (deficit round robin
with a quantum of `weight` jobs per turn, weight 1 unless configured), so one
tenant's campaign of a million messages cannot starve another tenant's ten:
each tenant with waiting mail gets its share of every bucket. Within a tenant,
oldest first.

Sync, no I/O. push and pop cost O(log n) for the tenant's heap plus O(t) for the
t tenants with waiting jobs (a scan for the top priority); t is small.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from datetime import datetime
from typing import Generic, TypeVar

T = TypeVar("T")


class ReadyQueue(Generic[T]):
    def __init__(self, weights: Mapping[str, int] | None = None) -> None:
        self._weights = weights or {}
        self._heaps: dict[str, list[tuple[int, datetime, int, T]]] = {}  # tenant -> (-priority, age, seq, item)
        self._order: list[str] = []  # tenants with jobs, in turn order
        self._turn = -1  # index in _order of the tenant whose turn it is (none yet)
        self._left = 0  # jobs the tenant whose turn it is may still take in this turn
        self._sequence = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, tenant: str, priority: int, age: datetime, item: T) -> None:
        heap = self._heaps.get(tenant)
        if heap is None:
            heap = self._heaps[tenant] = []
            self._order.append(tenant)
        heapq.heappush(heap, (-priority, age, next(self._sequence), item))
        self._size += 1

    def peek(self) -> T:
        """The next item (IndexError when empty); pop() then removes this same item."""
        return self._heaps[self._choose()][0][3]

    def pop(self) -> T:
        tenant = self._choose()
        heap = self._heaps[tenant]
        item = heapq.heappop(heap)[3]
        self._size -= 1
        self._left -= 1
        if not heap:
            del self._heaps[tenant]
            index = self._order.index(tenant)
            del self._order[index]
            if index <= self._turn:
                self._turn -= 1  # the next turn is the next tenant's
            self._left = 0  # its turn ends with its jobs
        return item

    def _choose(self) -> str:
        """The tenant whose job goes next: the current turn's tenant while it has
        quantum left and a job at the top priority, else the next such tenant."""
        if not self._order:
            raise IndexError("the ready queue is empty")
        top = min(heap[0][0] for heap in self._heaps.values())  # -priority
        count = len(self._order)
        self._turn %= count
        tenant = self._order[self._turn]
        if self._left > 0 and self._heaps[tenant][0][0] == top:
            return tenant
        for step in range(1, count + 1):
            index = (self._turn + step) % count
            tenant = self._order[index]
            if self._heaps[tenant][0][0] == top:
                self._turn = index
                self._left = self._weights.get(tenant, 1)
                return tenant
        raise AssertionError("unreachable: some tenant holds the top priority")

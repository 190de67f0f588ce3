"""A ready queue: priority first, then fair turns among tenants and, within a
tenant, among its campaigns, then age.

The jobs waiting for one provider group's bucket. The highest priority present
always goes first, so a password reset never waits behind a newsletter. Among
the tenants that have jobs at that priority, turns go round (deficit round robin
with a quantum of `weight` jobs per turn, weight 1 unless configured), so one
tenant's campaign of a million messages cannot starve another tenant's ten:
each tenant with waiting mail gets its share of every bucket. Within a tenant's
turn, its mail of no campaign (transactional) goes first, then its campaigns
take turns, one job each, so its big campaign does not starve its small one.
Within a campaign, oldest first.

Sync, no I/O. push and pop cost O(log n) for the campaign's heap plus O(t + c)
for the t tenants with waiting jobs and the c campaigns of the one chosen (scans
for the top priority); t and c are small.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

T = TypeVar("T")
_Entry = tuple[int, datetime, int, T]  # (-priority, age, seq, item)


@dataclass(slots=True)
class _Turns(Generic[T]):
    """A tenant's jobs: a heap per campaign (None: mail of no campaign), and the
    campaigns' turns."""

    heaps: dict[str | None, list[_Entry[T]]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # campaigns with jobs, in turn order
    turn: int = -1  # index in order of the campaign whose turn it is (none yet)
    left: int = 0  # whether that campaign's turn still holds a job

    def top(self) -> int:
        """-priority of its most urgent job."""
        return min(heap[0][0] for heap in self.heaps.values())

    def choose(self, top: int) -> str | None:
        """The campaign whose job goes next at priority `top` (None: no campaign's)."""
        plain = self.heaps.get(None)
        if plain is not None and plain[0][0] == top:
            return None
        count = len(self.order)
        self.turn %= count
        if self.left > 0 and self.heaps[self.order[self.turn]][0][0] == top:
            return self.order[self.turn]
        for step in range(1, count + 1):
            index = (self.turn + step) % count
            if self.heaps[self.order[index]][0][0] == top:
                self.turn, self.left = index, 1
                return self.order[index]
        raise AssertionError("unreachable: some campaign holds the top priority")

    def pop(self, campaign: str | None) -> T:
        heap = self.heaps[campaign]
        item = heapq.heappop(heap)[3]
        if campaign is not None:
            self.left -= 1
        if not heap:
            del self.heaps[campaign]
            if campaign is not None:
                index = self.order.index(campaign)
                del self.order[index]
                if index <= self.turn:
                    self.turn -= 1  # the next turn is the next campaign's
                self.left = 0
        return item


class ReadyQueue(Generic[T]):
    def __init__(self, weights: Mapping[str, int] | None = None) -> None:
        self._weights = weights or {}
        self._tenants: dict[str, _Turns[T]] = {}
        self._order: list[str] = []  # tenants with jobs, in turn order
        self._turn = -1  # index in _order of the tenant whose turn it is (none yet)
        self._left = 0  # jobs the tenant whose turn it is may still take in this turn
        self._sequence = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, tenant: str, priority: int, age: datetime, item: T, campaign: str | None = None) -> None:
        turns = self._tenants.get(tenant)
        if turns is None:
            turns = self._tenants[tenant] = _Turns()
            self._order.append(tenant)
        heap = turns.heaps.get(campaign)
        if heap is None:
            heap = turns.heaps[campaign] = []
            if campaign is not None:
                turns.order.append(campaign)
        heapq.heappush(heap, (-priority, age, next(self._sequence), item))
        self._size += 1

    def peek(self) -> T:
        """The next item (IndexError when empty); pop() then removes this same item."""
        tenant, top = self._choose()
        turns = self._tenants[tenant]
        return turns.heaps[turns.choose(top)][0][3]

    def pop(self) -> T:
        tenant, top = self._choose()
        turns = self._tenants[tenant]
        item = turns.pop(turns.choose(top))
        self._size -= 1
        self._left -= 1
        if not turns.heaps:
            del self._tenants[tenant]
            index = self._order.index(tenant)
            del self._order[index]
            if index <= self._turn:
                self._turn -= 1  # the next turn is the next tenant's
            self._left = 0  # its turn ends with its jobs
        return item

    def _choose(self) -> tuple[str, int]:
        """The tenant whose job goes next, and the top priority (negated): the current
        turn's tenant while it has quantum left and a job at the top priority, else
        the next such tenant."""
        if not self._order:
            raise IndexError("the ready queue is empty")
        tops = {tenant: turns.top() for tenant, turns in self._tenants.items()}
        top = min(tops.values())
        count = len(self._order)
        self._turn %= count
        tenant = self._order[self._turn]
        if self._left > 0 and tops[tenant] == top:
            return tenant, top
        for step in range(1, count + 1):
            index = (self._turn + step) % count
            tenant = self._order[index]
            if tops[tenant] == top:
                self._turn = index
                self._left = self._weights.get(tenant, 1)
                return tenant, top
        raise AssertionError("unreachable: some tenant holds the top priority")

"""Warm-up: how much a new source address may send to each provider, day by day.

An address listed in its pool's `warming` is new, and may send to each provider
at most min(target, round(start * growth ** (day - 1))) messages on its warm-up
day `day` (`Warmup.cap`). Days are 24 h long and start when the address first
sends to the provider; `Days.advance(now)`, called every minute or so by the
owner, ends them: the day number advances only if the finished day had sends and
its deferral rate and complaint rate (over its sends) stayed under the pool's
thresholds; otherwise the same day starts again. Until it is called a finished
day's count still applies, which errs towards sending less. At the day whose cap
reaches the target the address is warm at that provider and has no cap there.

Complaints arrive late (feedback loops), on any node: the `reputation` event
consumer counts each in PostgreSQL (`warmup_complaints`) for the address and
provider its delivery left from, at the minute it arrived, and `hear` (one
statement, at each checkpoint, before `advance`) gives every day the complaints
that arrived within it. The days are persisted in the `warmup` table by `save`
and read back at start by `load` (one statement each, a row per warming address
and provider). Several nodes: each takes its share of a cap
(cap // live nodes, at least one, `set_nodes`), and judges its own sends against
its share of the complaints (complaints / live nodes).

Memory: an entry per warming address and provider sent to while warming. Times
are wall-clock seconds (time.time), since days are stored as timestamps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mtad import db

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Warmup:
    """The warm-up schedule of a pool's new addresses, per provider."""

    start: int = 50  # sends per provider on day 1
    growth: float = 1.5  # the cap grows by this factor per day
    target: int = 100_000  # the cap at which an address counts as warm
    max_deferral_rate: float = 0.10  # a day advances only if its rates stayed under these
    max_complaint_rate: float = 0.003

    def cap(self, day: int) -> int:
        """Sends to one provider allowed on warm-up day `day` (1 is the first)."""
        try:
            return min(self.target, round(self.start * self.growth ** (day - 1)))
        except OverflowError:
            return self.target

    def warm(self, day: int) -> bool:
        """Whether an address on this day has finished warming (no cap any more)."""
        return self.cap(day) >= self.target


@dataclass(frozen=True, slots=True)
class WarmupRow:
    """The warm-up state of one address at one provider, as stored."""

    address: str
    provider: str
    day: int
    day_started: float  # wall-clock seconds
    sent: int
    deferred: int
    complaints: int


@dataclass(frozen=True, slots=True)
class DayEnd:
    """A warm-up day that ended in `advance`; worth a log line."""

    address: str
    provider: str
    day: int  # the day that ended
    next_day: int  # day + 1 if it advanced, else day (a refusal)
    sent: int
    deferred: int
    complaints: int  # heard from every node's mail (the rate took this node's share)
    warm: bool  # next_day's cap reaches the target: the address is warm at this provider
    why: str | None  # why it did not advance


@dataclass(frozen=True, slots=True)
class WarmupStatistics:
    provider: str
    day: int
    cap: int | None  # this node's share of the day's cap; None: warm
    sent: int
    deferred: int
    complaints: int
    day_started: float


@dataclass(slots=True)
class _Day:
    """A warming address's current day at one provider."""

    day: int
    day_started: float
    sent: int = 0
    deferred: int = 0
    complaints: int = 0


class Days:
    """The warm-up days of the warming addresses, per provider, and what they allow
    this node. Sync, no I/O."""

    def __init__(self) -> None:
        self._schedules: dict[str, Warmup] = {}  # address -> its pool's schedule
        self._warming: frozenset[str] = frozenset()
        self._days: dict[tuple[str, str], _Day] = {}  # (address, provider): warming addresses only
        self._nodes = 1

    def configure(self, schedules: Mapping[str, Warmup], warming: frozenset[str]) -> None:
        """Every pool address's schedule, and those listed as warming (at start, at a
        reload); the days kept stay with their addresses."""
        self._schedules, self._warming = dict(schedules), warming

    def set_nodes(self, count: int) -> None:
        """The number of live nodes sharing the pools: each takes cap // count."""
        self._nodes = max(1, count)

    def warming_at(self, address: str, provider: str) -> bool:
        """Whether sends of `address` to `provider` are still capped."""
        if address not in self._warming:
            return False
        day = self._days.get((address, provider))
        return day is None or not self._schedules[address].warm(day.day)

    def has_room(self, address: str, provider: str) -> bool:
        """Whether `address` may send to `provider` once more today."""
        if not self.warming_at(address, provider):
            return True
        day = self._days.get((address, provider))
        return day is None or day.sent < self._share(address, day.day)

    def cap_today(self, address: str, provider: str) -> int:
        """This node's share of the cap of the address's current day at the provider
        (one it has sent to while warming)."""
        return self._share(address, self._days[(address, provider)].day)

    def _share(self, address: str, day: int) -> int:
        return max(1, self._schedules[address].cap(day) // self._nodes)

    def sent(self, address: str, provider: str, count: int, now: float) -> None:
        """Count `count` sends of a warming address (its first starts its day 1)."""
        if address in self._warming:
            day = self._days.setdefault((address, provider), _Day(1, now))
            if not self._schedules[address].warm(day.day):
                day.sent += count

    def deferred(self, address: str, provider: str, now: float) -> None:
        """Count a deferral (or throttling) of a send of a warming address."""
        if address in self._warming:
            day = self._days.setdefault((address, provider), _Day(1, now))
            if not self._schedules[address].warm(day.day):
                day.deferred += 1

    def hearing(self) -> list[tuple[str, str, float]]:
        """The warm-up days that complaints may still count towards (address,
        provider, day_started): those not warm yet, for `hear`."""
        return [
            (address, provider, d.day_started)
            for (address, provider), d in self._days.items()
            if not self._schedules[address].warm(d.day)
        ]

    def heard(self, address: str, provider: str, day_started: float, complaints: int) -> None:
        """`complaints` arrived, from every node's mail, within the day of `address` at
        `provider` that started at `day_started` (ignored once that day is over here)."""
        day = self._days.get((address, provider))
        if day is not None and day.day_started == day_started:
            day.complaints = max(day.complaints, complaints)

    def advance(self, now: float) -> list[DayEnd]:
        """End every warm-up day that began 24 h or more before `now`: the next day
        starts (aligned on the day's start), advancing the day number only when the
        finished day had sends and stayed under both rate thresholds (the complaint
        rate with this node's share of the complaints heard)."""
        ended: list[DayEnd] = []
        for (address, provider), day in self._days.items():
            warmup = self._schedules[address]
            elapsed = now - day.day_started
            if warmup.warm(day.day) or elapsed < DAY:
                continue
            why = _refusal(warmup, day, self._nodes)
            next_day = day.day if why else day.day + 1
            counts = (day.sent, day.deferred, day.complaints)
            ended.append(DayEnd(address, provider, day.day, next_day, *counts, warmup.warm(next_day), why))
            day.day = next_day
            day.day_started += DAY * math.floor(elapsed / DAY)
            day.sent = day.deferred = day.complaints = 0
        return ended

    def state(self) -> list[WarmupRow]:
        """Every warming address's day per provider, for `save`."""
        return [
            WarmupRow(address, provider, d.day, d.day_started, d.sent, d.deferred, d.complaints)
            for (address, provider), d in self._days.items()
        ]

    def warming_addresses(self) -> list[str]:
        return sorted(self._warming)

    def restore(self, rows: list[WarmupRow]) -> int:
        """Take stored warm-up days (at start); rows of addresses that are not
        warming in any pool are ignored. Returns how many were taken."""
        taken = 0
        for row in rows:
            if row.address not in self._warming:
                continue
            self._days[(row.address, row.provider)] = _Day(
                row.day, row.day_started, row.sent, row.deferred, row.complaints
            )
            taken += 1
        return taken

    def statistics(self) -> dict[str, list[WarmupStatistics]]:
        """address -> its days, by provider."""
        days: dict[str, list[WarmupStatistics]] = {}
        for (address, provider), d in sorted(self._days.items()):
            cap = None if self._schedules[address].warm(d.day) else self._share(address, d.day)
            days.setdefault(address, []).append(
                WarmupStatistics(provider, d.day, cap, d.sent, d.deferred, d.complaints, d.day_started)
            )
        return days


# --- persistence: the `warmup` table, and the complaints counted for it


def _timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def load(database: db.Database, days: Days) -> int:
    """Restore the stored warm-up days of the pools' warming addresses; returns how
    many (address, provider) rows were taken. Call `advance` after it, since
    days may have ended while no node ran."""
    rows = await database.fetch("egress/load", days.warming_addresses())
    stored = [
        WarmupRow(
            address=r["address"],
            provider=r["provider"],
            day=r["day"],
            day_started=r["day_started"].timestamp(),
            sent=r["sent"],
            deferred=r["deferred"],
            complaints=r["complaints"],
        )
        for r in rows
    ]
    return days.restore(stored)


async def listing(database: db.Database) -> list[dict[str, Any]]:
    """Every stored warm-up day (`GET /v1/warmup`): a row per warming address and provider."""
    return [dict(r) for r in await database.fetch("egress/list")]


async def hear(database: db.Database, days: Days) -> int:
    """Give each warm-up day the complaints that arrived within it (one statement;
    the `reputation` consumer counts them as they arrive, see egress/complaints.sql).
    Call it before `advance`, so that a day is judged with them. Returns how
    many days have complaints."""
    asked = days.hearing()
    if not asked:
        return 0
    rows = await database.fetch(
        "egress/complaints", [d[0] for d in asked], [d[1] for d in asked], [_timestamp(d[2]) for d in asked]
    )
    started = {(address, provider): at for address, provider, at in asked}  # as asked: a float's round trip may differ
    for r in rows:
        days.heard(r["address"], r["provider"], started[(r["address"], r["provider"])], r["complaints"])
    return len(rows)


async def save(database: db.Database, days: Days, now: float) -> int:
    """Write every warm-up day (one statement, idempotent); returns how many rows
    changed, `now` the time of the write. A row is never moved backwards (see save.sql)."""
    rows = days.state()
    if not rows:
        return 0
    written = await database.fetch(
        "egress/save",
        [r.address for r in rows],
        [r.provider for r in rows],
        [r.day for r in rows],
        [_timestamp(r.day_started) for r in rows],
        [r.sent for r in rows],
        [r.deferred for r in rows],
        [r.complaints for r in rows],
        _timestamp(now),
    )
    return len(written)


def _refusal(warmup: Warmup, day: _Day, nodes: int) -> str | None:
    """Why a finished warm-up day must not advance, or None. The complaints are
    every node's: this node's sends answer for its share of them."""
    if day.sent == 0:
        return "no sends"
    reasons = []
    deferral_rate = day.deferred / day.sent
    complaint_rate = day.complaints / nodes / day.sent
    if deferral_rate >= warmup.max_deferral_rate:
        reasons.append(f"deferral rate {deferral_rate:.3f} is not under {warmup.max_deferral_rate}")
    if complaint_rate >= warmup.max_complaint_rate:
        reasons.append(f"complaint rate {complaint_rate:.4f} is not under {warmup.max_complaint_rate}")
    return "; ".join(reasons) or None

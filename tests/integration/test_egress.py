"""Warm-up state against real PostgreSQL: save, load, an upsert that never goes backwards, and the
complaints the reputation consumer counts, heard by the day they came in."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime

from mtad import db
from mtad.deliver import warmup
from mtad.deliver.egress import Egress, PoolSettings, SendOutcome
from mtad.deliver.warmup import DAY, Warmup, WarmupRow
from mtad.feedback import consumers, reputation
from tests.pg import query

START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()
A, W, V = "192.0.2.1", "192.0.2.9", "2001:db8::9"  # A is warm; W and V are warming up


class Clock:
    def __init__(self, t: float = START) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(clock: Clock, warming: frozenset[str] = frozenset({W, V})) -> Egress:
    pool = PoolSettings("bulk", (A, W, V), warming=warming, warmup=Warmup(start=10, growth=2.0, target=1000))
    return Egress({"bulk": pool}, now=clock, rng=random.Random(1))


async def rows(database: db.Database) -> list[tuple[object, ...]]:
    found = await query(
        database,
        "SELECT address, provider, day, day_started, sent, deferred, complaints, updated_at FROM warmup"
        " ORDER BY address, provider",
    )
    return [tuple(r) for r in found]


def warm_up(clock: Clock) -> Egress:
    """W: day 2 at microsoft (7 sent, 1 deferred), day 1 at yahoo (3 sent, 1 complaint); V: day 1 at microsoft."""
    e = make(clock)
    for _ in range(10):
        e.sent("bulk", "microsoft", W)
    clock.t += DAY
    assert [d.next_day for d in e.advance_days(clock())] == [2]
    for _ in range(7):
        e.sent("bulk", "microsoft", W)
    e.report("bulk", "microsoft", W, SendOutcome.THROTTLED)
    e.sent("bulk", "yahoo", W, count=3)
    e.days.heard(W, "yahoo", START + DAY, 1)
    e.sent("bulk", "microsoft", V)
    e.sent("bulk", "microsoft", A)  # a warm address: nothing to store
    return e


async def test_save_then_load_restores_days_and_counts(database: db.Database) -> None:
    clock = Clock()
    before = warm_up(clock)
    assert await warmup.save(database, before.days, before.now()) == 3
    stored = await rows(database)
    assert [r[:3] for r in stored] == [(W, "microsoft", 2), (W, "yahoo", 1), (V, "microsoft", 1)]
    assert stored[0][3:7] == (datetime.fromtimestamp(START + DAY, UTC), 7, 1, 0)
    assert stored[1][3:7] == (datetime.fromtimestamp(START + DAY, UTC), 3, 0, 1)
    assert {r[7] for r in stored} == {datetime.fromtimestamp(clock(), UTC)}

    after = make(Clock(clock()))
    assert await warmup.load(database, after.days) == 3
    assert sorted(after.days.state(), key=_order) == sorted(before.days.state(), key=_order)
    # The restored count holds: W (where microsoft starts) may send 20 on day 2 and has sent 7.
    sends = []
    for _ in range(14):
        choice = after.choose("bulk", "microsoft")
        after.sent("bulk", "microsoft", choice.address)
        sends.append(choice.address)
    assert sends == [W] * 13 + [A]


def _order(row: WarmupRow) -> tuple[str, str]:
    return (row.address, row.provider)


async def test_load_takes_only_addresses_that_are_warming(database: db.Database) -> None:
    clock = Clock()
    warmed = warm_up(clock)
    assert await warmup.save(database, warmed.days, warmed.now()) == 3
    only_w = make(clock, warming=frozenset({W}))
    assert await warmup.load(database, only_w.days) == 2
    assert {r.address for r in only_w.days.state()} == {W}


async def test_the_upsert_is_idempotent(database: db.Database) -> None:
    clock = Clock()
    e = warm_up(clock)
    assert await warmup.save(database, e.days, e.now()) == 3
    first = await rows(database)
    clock.t += 60
    assert await warmup.save(database, e.days, e.now()) == 0  # nothing changed: nothing written, updated_at included
    assert await rows(database) == first
    e.sent("bulk", "yahoo", W)
    assert await warmup.save(database, e.days, e.now()) == 1
    changed = await rows(database)
    assert changed[1][4] == 4
    assert changed[1][7] == datetime.fromtimestamp(clock(), UTC)
    assert [changed[0], changed[2]] == [first[0], first[2]]


async def test_a_save_never_moves_a_row_backwards(database: db.Database) -> None:
    clock = Clock()
    warmed = warm_up(clock)
    assert await warmup.save(database, warmed.days, warmed.now()) == 3
    newest = await rows(database)
    # Another node's stale view: W at microsoft still on day 1 (older), at yahoo the same
    # day with a smaller count, and V's day with a larger count.
    stale = make(clock)
    stale.days.restore(
        [
            WarmupRow(W, "microsoft", 1, START, 10, 0, 0),
            WarmupRow(W, "yahoo", 1, START + DAY, 2, 5, 0),
            WarmupRow(V, "microsoft", 1, START + DAY, 4, 0, 0),
        ]
    )
    assert await warmup.save(database, stale.days, stale.now()) == 2
    merged = await rows(database)
    assert merged[0] == newest[0]  # an older day is not written over a newer one
    assert merged[1][2:7] == (1, datetime.fromtimestamp(START + DAY, UTC), 3, 5, 1)  # the larger of each count
    assert merged[2][4] == 4


async def signal(database: db.Database, kind: str, at: float, data: dict[str, str], message: uuid.UUID,
                 delivery: int) -> None:  # fmt: skip
    await query(database, "INSERT INTO events (at, kind, tenant, message, delivery, data) "
                          "VALUES ($1, $2, 'shop', $3, $4, $5::jsonb)",
                datetime.fromtimestamp(at, UTC), kind, message, delivery, json.dumps(data))  # fmt: skip


async def test_complaints_counted_by_the_reputation_consumer_count_towards_the_day_they_came_in(
    database: db.Database,
) -> None:
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings())])
    await counting.catch_up()  # its position: the log's end
    start = START + 30  # the day starts at 12:00:30: the minute 12:00 is cut in two
    clock = Clock(start)
    e = make(clock)
    e.sent("bulk", "yahoo", W, count=10)
    e.sent("bulk", "gmail", A)  # a warm address has no day to hold back
    # Complaints about mail of W at yahoo, of W at gmail (another day) and of A, at
    # these times around the day at yahoo.
    times = {"before": start - 120, "cut": start - 20, "within": start + 3600, "next day": start + DAY - 10}
    for n, (what, at) in enumerate(times.items()):
        message = uuid.uuid4()
        await signal(database, "delivered", start, {"group": "yahoo", "source": W}, message, n)
        await signal(database, "complained", at, {"recipient": f"{what}@example.net"}, message, n)
    for n, (group, source) in enumerate([("gmail", W), ("yahoo", A)], start=10):
        message = uuid.uuid4()
        await signal(database, "delivered", start, {"group": group, "source": source}, message, n)
        await signal(database, "complained", start + 60, {"recipient": "r@example.net"}, message, n)
    await counting.catch_up()

    # The minute a day's start cuts in two counts towards that day; the minute the
    # next day's start cuts, towards the next day.
    assert e.days.hearing() == [(W, "yahoo", start)]
    assert await warmup.hear(database, e.days) == 1
    [day] = e.statistics().pools[0].addresses[1].warmup
    assert (day.provider, day.sent, day.complaints) == ("yahoo", 10, 2)
    clock.t = start + DAY + 5
    [ended] = e.advance_days(clock())
    assert (ended.day, ended.next_day, ended.complaints) == (1, 1, 2)
    assert ended.why == "complaint rate 0.2000 is not under 0.003"
    assert await warmup.hear(database, e.days) == 1
    assert e.statistics().pools[0].addresses[1].warmup[0].complaints == 1  # the next day's
    assert await warmup.save(database, e.days, e.now()) == 1
    assert (await rows(database))[0][2:7] == (1, datetime.fromtimestamp(start + DAY, UTC), 0, 0, 1)

"""Sending accounts against real PostgreSQL: reserve before send, limits, selection."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mtad import db
from mtad.base import errors
from mtad.feedback import consumers, reputation
from mtad.mailboxes import accounts, choosing
from mtad.mailboxes.accounts import Answer, State
from mtad.spool import leases
from tests.integration.mailboxes import make
from tests.integration.spooling import spool_messages
from tests.pg import query

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LOCK_CLASS = 1835098979  # the first half of an account's advisory lock key (migration 0006)


async def answer(
    database: db.Database, account: int, at: datetime, rng: random.Random | None = None, *, settle: bool = True
) -> Answer:
    """Reserve a send at `at`; with `settle`, it is settled when it was reserved (a send
    still in flight holds its mailbox: see test_a_send_in_flight_holds_its_mailbox...)."""
    decision = await accounts.reserve(database, account, at, rng or random.Random(0))
    if settle and decision.reservation is not None:
        assert await accounts.keep(database, decision.reservation, at)
    return decision.answer


async def count(database: db.Database, account: int | None = None) -> int:
    rows = await query(
        database, "SELECT count(*) AS n FROM account_reservations WHERE $1::integer IS NULL OR account = $1", account
    )
    return int(rows[0]["n"])


class Fixed(random.Random):
    """An rng whose every draw is `value`."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.serial
async def test_ten_thousand_concurrent_reservations_on_five_accounts_make_exactly_the_caps(dsn: str) -> None:
    database = await db.Database.connect(dsn, max_size=20)
    try:
        ids = [await make(database, f"a{i}", daily_cap=15) for i in range(5)]
        rng = random.Random(1)
        results = await asyncio.gather(
            *(accounts.reserve(database, ids[i % 5], NOW, rng) for i in range(10_000)), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        assert failures == []
        answers = collections.Counter(r.answer for r in results if isinstance(r, accounts.Decision))
        assert answers[Answer.RESERVED] == 75
        assert set(answers) <= {Answer.RESERVED, Answer.SKIPPED_LOCKED, Answer.SKIPPED_DAILY_LIMIT}
        assert sum(answers.values()) == 10_000
        rows = await query(database, "SELECT account, count(*) AS n FROM account_reservations GROUP BY account")
        assert {r["account"]: r["n"] for r in rows} == dict.fromkeys(ids, 15)
    finally:
        await database.close()


async def test_two_nodes_never_both_reserve_an_account_inside_its_gap(dsn: str) -> None:
    first, second = await db.Database.connect(dsn, max_size=5), await db.Database.connect(dsn, max_size=5)
    try:
        account = await make(first, "a", min_gap=300)
        rng = random.Random(2)
        decisions = await asyncio.gather(
            *(accounts.reserve(node, account, NOW + timedelta(milliseconds=i), rng)
              for i, node in enumerate([first, second] * 100))
        )  # fmt: skip
        answers = collections.Counter(d.answer for d in decisions)
        assert answers[Answer.RESERVED] == 1
        assert set(answers) <= {Answer.RESERVED, Answer.SKIPPED_LOCKED, Answer.SKIPPED_SENDING}
        assert await count(first) == 1
    finally:
        await first.close()
        await second.close()


async def test_a_held_lock_answers_skipped_locked_at_once_and_is_gone_after_the_call(database: db.Database) -> None:
    account = await make(database, "a")
    async with database.transaction() as other:
        await other.execute_text(f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {account})")
        decision = await accounts.reserve(database, account, NOW, random.Random(0))
        assert decision == accounts.Decision(Answer.SKIPPED_LOCKED)
    assert await answer(database, account, NOW) is Answer.RESERVED
    # The call took its lock in its own transaction: nothing is left held.
    held = await query(
        database,
        "SELECT objid FROM pg_locks WHERE locktype = 'advisory'"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    assert held == []


async def test_the_minimum_gap_holds(database: db.Database) -> None:
    account = await make(database, "a", min_gap=60)
    assert await answer(database, account, NOW) is Answer.RESERVED
    decision = await accounts.reserve(database, account, NOW + timedelta(seconds=30), random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_GAP, None, NOW + timedelta(seconds=60))
    assert await answer(database, account, NOW + timedelta(seconds=59.999)) is Answer.SKIPPED_GAP
    assert await answer(database, account, NOW + timedelta(seconds=60)) is Answer.RESERVED
    assert await count(database) == 2


async def test_the_jitter_is_drawn_per_send_and_kept_on_the_mailbox(database: db.Database) -> None:
    account = await make(database, "a", min_gap=10, jitter=(25, 45))
    assert await answer(database, account, NOW, Fixed(0.75)) is Answer.RESERVED
    [row] = await query(database, "SELECT next_gap FROM account_reservations")
    assert row["next_gap"] == pytest.approx(10 + 25 + 0.75 * 20)  # 50 s
    # Another caller (another campaign, process or node) with its own rng waits the
    # same 50 s: the gap was drawn once and stored with the send.
    other = Fixed(0.0)
    decision = await accounts.reserve(database, account, NOW + timedelta(seconds=35), other)
    assert (decision.answer, decision.retry_at) == (Answer.SKIPPED_GAP, NOW + timedelta(seconds=50))
    assert await answer(database, account, NOW + timedelta(seconds=50), other) is Answer.RESERVED
    # The next send drew 0: it waits the least, 35 s.
    assert await answer(database, account, NOW + timedelta(seconds=84), other) is Answer.SKIPPED_GAP
    assert await answer(database, account, NOW + timedelta(seconds=85), other) is Answer.RESERVED
    gaps = [r["next_gap"] for r in await query(database, "SELECT next_gap FROM account_reservations ORDER BY id")]
    assert gaps == pytest.approx([50, 35, 35])


async def test_draws_fall_within_the_jitter_range(database: db.Database) -> None:
    account = await make(database, "a", jitter=(25, 45))
    rng = random.Random(3)
    at = NOW
    for _ in range(30):
        assert await answer(database, account, at, rng) is Answer.RESERVED
        at += timedelta(seconds=45)
    gaps = [r["next_gap"] for r in await query(database, "SELECT next_gap FROM account_reservations")]
    assert all(25 <= g <= 45 for g in gaps)
    assert len(set(gaps)) == 30


@pytest.mark.parametrize(
    ("field", "cap", "width"),
    [("per_second", 2, timedelta(seconds=1)), ("per_minute", 3, timedelta(minutes=1)),
     ("per_hour", 2, timedelta(hours=1))],
)  # fmt: skip
async def test_rate_caps_hold_in_sliding_windows(database: db.Database, field: str, cap: int, width: timedelta) -> None:
    account = await make(database, "a", **{field: cap})
    step = width / 10
    for i in range(cap):
        assert await answer(database, account, NOW + i * step) is Answer.RESERVED
    decision = await accounts.reserve(database, account, NOW + width / 2, random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_RATE, None, NOW + width)
    # The first send leaves the window at NOW + width: one more fits, and no more.
    assert await answer(database, account, NOW + width - width / 1000) is Answer.SKIPPED_RATE
    assert await answer(database, account, NOW + width) is Answer.RESERVED
    assert await answer(database, account, NOW + width) is Answer.SKIPPED_RATE
    assert await count(database) == cap + 1


async def test_the_daily_cap_resets_at_midnight_utc(database: db.Database) -> None:
    account = await make(database, "a", daily_cap=2)
    midnight = datetime(2026, 11, 30, tzinfo=UTC)
    assert await answer(database, account, midnight - timedelta(minutes=2)) is Answer.RESERVED
    assert await answer(database, account, midnight - timedelta(minutes=1)) is Answer.RESERVED
    decision = await accounts.reserve(database, account, midnight - timedelta(milliseconds=1), random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_DAILY_LIMIT, None, midnight)
    assert await answer(database, account, midnight) is Answer.RESERVED
    assert await answer(database, account, midnight + timedelta(hours=23)) is Answer.RESERVED
    assert await answer(database, account, midnight + timedelta(hours=23, minutes=59)) is Answer.SKIPPED_DAILY_LIMIT


async def test_the_daily_cap_resets_at_midnight_in_the_accounts_time_zone(database: db.Database) -> None:
    new_york = await make(database, "ny", time_zone="America/New_York", daily_cap=1)
    utc = await make(database, "utc", daily_cap=1)
    # 2026-01-15 04:00Z is 23:00 on the 14th in New York (EST, UTC-5); its day ends at 05:00Z.
    before, after = datetime(2026, 1, 15, 4, tzinfo=UTC), datetime(2026, 1, 15, 5, tzinfo=UTC)
    for account in (new_york, utc):
        assert await answer(database, account, before) is Answer.RESERVED
    decision = await accounts.reserve(database, new_york, after - timedelta(milliseconds=1), random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_DAILY_LIMIT, None, after)
    assert await answer(database, new_york, after) is Answer.RESERVED
    # The UTC account's day began at 00:00Z and lasts until the 16th, 00:00Z.
    decision = await accounts.reserve(database, utc, after, random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_DAILY_LIMIT, None, datetime(2026, 1, 16, tzinfo=UTC))
    # On the day the clocks go forward (2026-03-08) New York's day is 23 hours long.
    spring = datetime(2026, 3, 8, 12, tzinfo=UTC)
    assert await answer(database, new_york, spring) is Answer.RESERVED
    decision = await accounts.reserve(database, new_york, spring, random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_DAILY_LIMIT, None, datetime(2026, 3, 9, 4, tzinfo=UTC))
    # On the day they go back (2026-11-01) it is 25 hours long.
    autumn = datetime(2026, 11, 1, 4, 30, tzinfo=UTC)  # 00:30 EDT
    assert await answer(database, new_york, autumn) is Answer.RESERVED
    decision = await accounts.reserve(database, new_york, autumn, random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_DAILY_LIMIT, None, datetime(2026, 11, 2, 5, tzinfo=UTC))


@pytest.mark.parametrize("state", [State.COOLING, State.PARKED, State.TRIPPED, State.RESTING])
async def test_a_resting_account_is_skipped_until_its_time(database: db.Database, state: State) -> None:
    account = await make(database, "a")
    until = NOW + timedelta(minutes=10)
    await accounts.set_state(database, "a", state, until, "421 4.7.0 slow down", NOW)
    decision = await accounts.reserve(database, account, NOW, random.Random(0))
    assert decision == accounts.Decision(Answer.SKIPPED_COOLDOWN, None, until)
    assert isinstance(await choosing.choose(database, "p", NOW, random.Random(0)), choosing.Busy)
    assert await answer(database, account, until - timedelta(milliseconds=1)) is Answer.SKIPPED_COOLDOWN
    assert await answer(database, account, until) is Answer.RESERVED
    reservation = await choosing.choose(database, "p", until + timedelta(seconds=1), random.Random(0))
    assert isinstance(reservation, accounts.Reservation)
    assert reservation.account.id == account


@pytest.mark.parametrize("state", [State.DISABLED, State.DISCONNECTED])
async def test_a_disabled_or_disconnected_account_waits_for_an_operator(database: db.Database, state: State) -> None:
    account = await make(database, "a")
    await accounts.set_state(database, "a", state, None, "535 5.7.8 bad credentials", NOW)
    much_later = NOW + timedelta(days=30)
    assert await accounts.reserve(database, account, much_later, random.Random(0)) == accounts.Decision(
        Answer.SKIPPED_DISABLED
    )
    assert isinstance(await choosing.choose(database, "p", much_later, random.Random(0)), choosing.Busy)
    enabled = await accounts.enable(database, "a", "operator", much_later)
    assert (enabled.state, enabled.state_until, enabled.state_reason) == (State.ACTIVE, None, "operator")
    assert await answer(database, account, much_later) is Answer.RESERVED


async def test_state_moves_follow_the_transition_table(database: db.Database) -> None:
    await make(database, "a")
    later = NOW + timedelta(hours=1)
    await accounts.disable(database, "a", "holiday", NOW)
    with pytest.raises(errors.IllegalTransition, match="disabled -> cooling"):
        await accounts.set_state(database, "a", State.COOLING, later, "421", NOW)
    await accounts.set_state(database, "a", State.ACTIVE, None, None, NOW)
    await accounts.set_state(database, "a", State.PARKED, later, "550 5.4.5 daily quota", NOW)
    with pytest.raises(errors.IllegalTransition, match="parked -> cooling"):
        await accounts.set_state(database, "a", State.COOLING, NOW + timedelta(minutes=5), "421", NOW)
    # Once the park is over the account is active again, and may cool down.
    cooled = await accounts.set_state(database, "a", State.COOLING, later + timedelta(hours=1), "421", later)
    assert (cooled.state, cooled.state_until, cooled.state_reason) == (State.COOLING, later + timedelta(hours=1), "421")
    with pytest.raises(errors.IllegalTransition, match="no end time"):
        await accounts.set_state(database, "a", State.ACTIVE, later, None, NOW)
    with pytest.raises(errors.NotFound):
        await accounts.set_state(database, "nobody", State.DISABLED, None, None, NOW)
    for state, allowed in accounts.TRANSITIONS.items():
        assert State.ACTIVE in allowed
        assert State.DISABLED in allowed
        assert state in allowed  # a new end time and reason
    assert set(accounts.TRANSITIONS) == set(State)


async def test_release_frees_the_slot_and_confirm_keeps_it(database: db.Database) -> None:
    account = await make(database, "a", daily_cap=1, min_gap=600)
    first = await accounts.reserve(database, account, NOW, random.Random(0))
    assert first.answer is Answer.RESERVED
    assert first.reservation is not None
    assert await answer(database, account, NOW + timedelta(seconds=1)) is Answer.SKIPPED_DAILY_LIMIT
    assert await accounts.release(database, first.reservation, NOW)
    assert not await accounts.release(database, first.reservation)  # already released
    assert not await accounts.confirm(database, first.reservation, NOW)
    # The day's slot is free again, but the receiver may have seen the send: its gap stands.
    assert await answer(database, account, NOW + timedelta(seconds=599)) is Answer.SKIPPED_GAP
    second = await accounts.reserve(database, account, NOW + timedelta(seconds=600), random.Random(0))
    assert second.answer is Answer.RESERVED
    assert second.reservation is not None
    assert await accounts.confirm(database, second.reservation, NOW)
    assert not await accounts.release(database, second.reservation)  # it went out: never released
    rows = await query(database, "SELECT state::text AS state FROM account_reservations ORDER BY id")
    assert [r["state"] for r in rows] == ["released", "confirmed"]
    assert await answer(database, account, NOW + timedelta(hours=1)) is Answer.SKIPPED_DAILY_LIMIT


async def test_an_unconfirmed_reservation_counts(database: db.Database) -> None:
    account = await make(database, "a", daily_cap=2)
    for i in range(2):
        decision = await accounts.reserve(database, account, NOW + timedelta(seconds=i), random.Random(0))
        assert decision.reservation is not None
        assert await accounts.keep(database, decision.reservation, NOW)  # the outcome is unknown
    assert await answer(database, account, NOW + timedelta(hours=1)) is Answer.SKIPPED_DAILY_LIMIT
    [usage] = await accounts.usage(database, NOW + timedelta(hours=1))
    last = NOW + timedelta(seconds=1)
    assert (usage.today, usage.last_send, usage.gap_until) == (2, last, last)


async def test_least_used_first_spreads_volume_evenly_over_a_pool(database: db.Database) -> None:
    ids = [await make(database, f"a{i}") for i in range(4)]
    other_pool = await make(database, "q0", pool="q")
    rng = random.Random(4)
    for i in range(3):  # a0 has sent three times already today
        assert await answer(database, ids[0], NOW - timedelta(hours=1, seconds=-i)) is Answer.RESERVED
    chosen = []
    for i in range(9 + 40):
        reservation = await choosing.choose(database, "p", NOW + timedelta(seconds=i), rng)
        assert isinstance(reservation, accounts.Reservation)
        assert reservation.reserved_at == NOW + timedelta(seconds=i)
        chosen.append(reservation.account.name)
    # The other three catch up first, then the four take turns, longest idle first.
    assert chosen[:9] == ["a1", "a2", "a3"] * 3
    assert chosen[9:] == ["a0", "a1", "a2", "a3"] * 10
    usage = {u.account.name: u.today for u in await accounts.usage(database, NOW + timedelta(minutes=5))}
    assert usage == {"a0": 13, "a1": 13, "a2": 13, "a3": 13, "q0": 0}
    assert await count(database, other_pool) == 0
    assert isinstance(await choosing.choose(database, "no-such-pool", NOW, rng), choosing.Busy)


async def test_choose_tries_the_next_account_when_one_is_taken(dsn: str) -> None:
    database = await db.Database.connect(dsn, max_size=10)
    try:
        ids = [await make(database, f"a{i}", min_gap=60) for i in range(5)]
        rng = random.Random(5)
        chosen = await asyncio.gather(*(choosing.choose(database, "p", NOW, rng) for _ in range(20)))
        reserved = [r for r in chosen if isinstance(r, accounts.Reservation)]
        assert sorted(r.account.id for r in reserved) == ids  # one each: the send in flight forbids a second
        assert await count(database) == 5
        assert isinstance(await choosing.choose(database, "p", NOW + timedelta(seconds=60), rng), choosing.Busy)
        for r in reserved:
            assert await accounts.keep(database, r.id, NOW)
        assert isinstance(await choosing.choose(database, "p", NOW + timedelta(seconds=59), rng), choosing.Busy)
        assert isinstance(await choosing.choose(database, "p", NOW + timedelta(seconds=60), rng), accounts.Reservation)
    finally:
        await database.close()


async def test_choose_skips_accounts_at_their_daily_cap(database: db.Database) -> None:
    await make(database, "a0", daily_cap=1)
    await make(database, "a1", daily_cap=2)
    rng = random.Random(6)
    names = []
    for i in range(4):
        reservation = await choosing.choose(database, "p", NOW + timedelta(seconds=i), rng)
        names.append(reservation.account.name if isinstance(reservation, accounts.Reservation) else None)
    assert names == ["a0", "a1", "a1", None]


async def test_add_get_and_list(database: db.Database) -> None:
    combos = [(tls, mechanism) for tls in accounts.Tls for mechanism in accounts.Mechanism]
    for i, (tls, mechanism) in enumerate(combos):  # every Python value passes the table's CHECKs
        account = accounts.Account(
            name=f"m{i}", address=f"m{i}@example.com", pool="p", host="smtp.example.com", port=465,
            login=f"m{i}", tls=tls, mechanism=mechanism, time_zone="Europe/Paris",
            limits=accounts.Limits(daily_cap=50, min_gap=420, jitter=(25.0, 45.0), per_second=1, per_minute=2,
                                   per_hour=30),
        )  # fmt: skip
        stored = await accounts.add(database, account)
        assert stored.id > 0
        assert stored.created_at is not None
        assert (stored.state, stored.state_until, stored.state_reason) == (State.ACTIVE, None, None)
        assert stored == await accounts.get(database, f"m{i}")
        fields = ("name", "address", "pool", "host", "port", "login", "tls", "mechanism", "limits", "time_zone")
        assert all(getattr(stored, f) == getattr(account, f) for f in fields)
    assert [a.name for a in await accounts.list_all(database)] == [f"m{i}" for i in range(len(combos))]
    with pytest.raises(errors.Conflict, match="'m0' already exists"):
        await accounts.add(database, dataclasses.replace(account, name="m0"))
    with pytest.raises(errors.NotFound):
        await accounts.get(database, "nobody")
    [row] = await query(database, "SELECT count(*) AS n FROM accounts WHERE secret IS NOT NULL")
    assert row["n"] == 0


async def test_add_reports_every_problem_at_once(database: db.Database) -> None:
    bad = accounts.Account(
        name="-bad", address="nobody", pool="", host="", port=0, login="", time_zone="Mars/Olympus",
        limits=accounts.Limits(daily_cap=0, min_gap=-1, jitter=(45, 25), per_second=0),
    )  # fmt: skip
    with pytest.raises(errors.ConfigError) as raised:
        await accounts.add(database, bad)
    assert len(raised.value.problems) == 11
    assert await accounts.list_all(database) == []


@pytest.mark.parametrize(
    ("column", "value", "error"),
    [("address", "'nobody'", "accounts_address_check"), ("time_zone", "'Mars/Olympus'", "time zone"),
     ("tls", "'ssl'", "accounts_tls_check"), ("gap_jitter_low", "5", "gap_jitter_range")],
)  # fmt: skip
async def test_the_table_refuses_what_add_refuses(database: db.Database, column: str, value: str, error: str) -> None:
    values = {"name": "'a'", "address": "'a@example.com'", "pool": "'p'", "host": "'h'", "port": "587",
              "tls": "'starttls'", "login": "'a'", "mechanism": "'plain'", column: value}  # fmt: skip
    with pytest.raises(errors.SpoolError, match=error):
        async with database.transaction() as tx:
            await tx.execute_text(f"INSERT INTO accounts ({', '.join(values)}) VALUES ({', '.join(values.values())})")


async def test_reserve_on_a_missing_account_is_not_found(database: db.Database) -> None:
    with pytest.raises(errors.NotFound):
        await accounts.reserve(database, 12345, NOW, random.Random(0))


async def test_prune_keeps_what_the_limits_still_look_at(database: db.Database) -> None:
    busy = await make(database, "busy")
    quiet = await make(database, "quiet", min_gap=86400 * 3)
    for i in range(5):
        assert await answer(database, busy, NOW - timedelta(days=3, seconds=-i)) is Answer.RESERVED
    assert await answer(database, busy, NOW) is Answer.RESERVED
    assert await answer(database, quiet, NOW - timedelta(days=3)) is Answer.RESERVED
    assert await accounts.prune(database, NOW - timedelta(days=2)) == 5
    assert (await count(database, busy), await count(database, quiet)) == (1, 1)
    # The quiet account's only reservation stays, and its gap with it.
    assert await answer(database, quiet, NOW - timedelta(seconds=1)) is Answer.SKIPPED_GAP


async def test_the_gap_runs_from_when_a_send_was_settled_if_that_is_later(database: db.Database) -> None:
    account = await make(database, "a", min_gap=2.0)
    first = await accounts.reserve(database, account, NOW, random.Random(0))
    assert first.reservation is not None
    # The send took 1.5 s to reach the receiver (a new session, TLS, AUTH): the next
    # send over a warm session must not arrive within 2 s of this one.
    assert await accounts.confirm(database, first.reservation, NOW + timedelta(seconds=1.5))
    refused = await accounts.reserve(database, account, NOW + timedelta(seconds=2.5), random.Random(0))
    assert (refused.answer, refused.retry_at) == (Answer.SKIPPED_GAP, NOW + timedelta(seconds=3.5))
    assert await answer(database, account, NOW + timedelta(seconds=3.5)) is Answer.RESERVED


async def leased_delivery(database: db.Database, node: str, until: datetime) -> int:
    """One delivery of a spooled message, leased to `node` until `until`."""
    await spool_messages(database, "r@example.net")
    [leased] = await leases.lease(database, node, 1, datetime.now(UTC), until)
    return leased.id


async def test_a_send_in_flight_holds_its_mailbox_until_it_is_settled(database: db.Database) -> None:
    account = await make(database, "a", min_gap=3, jitter=(0.5, 1.5))
    delivery = await leased_delivery(database, "n1", NOW + timedelta(minutes=5))
    first = await accounts.reserve(database, account, NOW, Fixed(0.0), delivery=delivery, node="n1")
    assert first.reservation is not None
    # The provider has not answered 60 s later: the mailbox is still sending, whatever the gap.
    held = await accounts.reserve(database, account, NOW + timedelta(seconds=60), Fixed(0.0))
    assert (held.answer, held.retry_at) == (Answer.SKIPPED_SENDING, NOW + timedelta(seconds=63.5))
    assert isinstance(await choosing.choose(database, "p", NOW + timedelta(seconds=60), Fixed(0.0)), choosing.Busy)
    status = await choosing.pool_status(database, "p", NOW + timedelta(seconds=60))
    assert (status.paused, status.next_free) == (False, NOW + timedelta(seconds=63.5))
    [use] = await accounts.usage(database, NOW + timedelta(seconds=60))
    assert (use.sending, use.gap_until, use.today) == (True, None, 1)
    # It answered at +61: the gap (3 s + 0.5 s of jitter) runs from the answer.
    assert await accounts.confirm(database, first.reservation, NOW + timedelta(seconds=61), delivery)
    gap = await accounts.reserve(database, account, NOW + timedelta(seconds=62), Fixed(0.0))
    assert (gap.answer, gap.retry_at) == (Answer.SKIPPED_GAP, NOW + timedelta(seconds=64.5))
    assert await answer(database, account, NOW + timedelta(seconds=64.5)) is Answer.RESERVED


async def test_a_send_whose_lease_ends_unsettled_counts_and_its_gap_runs_from_the_lease_end(
    database: db.Database,
) -> None:
    account = await make(database, "a", min_gap=3, daily_cap=5)
    lease_end = NOW + timedelta(minutes=5)
    delivery = await leased_delivery(database, "n1", lease_end)
    decision = await accounts.reserve(database, account, NOW, Fixed(0.0), delivery=delivery, node="n1")
    assert decision.reservation is not None
    # Its node died in the middle of DATA: nothing settles it, and the lease says when it is gone.
    later = lease_end - timedelta(milliseconds=1)
    assert await answer(database, account, later, settle=False) is Answer.SKIPPED_SENDING
    refused = await accounts.reserve(database, account, lease_end + timedelta(seconds=1), Fixed(0.0))
    assert (refused.answer, refused.retry_at) == (Answer.SKIPPED_GAP, lease_end + timedelta(seconds=3))
    # The reaper requeues the delivery (maybe sent) and settles the send at the lease's end.
    assert await leases.reap(database, lease_end + timedelta(seconds=2)) == 1
    [row] = await query(database, "SELECT settled_at, state::text AS state FROM account_reservations")
    assert (row["settled_at"], row["state"]) == (lease_end, "reserved")
    assert await answer(database, account, lease_end + timedelta(seconds=2.9)) is Answer.SKIPPED_GAP
    assert await answer(database, account, lease_end + timedelta(seconds=3)) is Answer.RESERVED
    [use] = await accounts.usage(database, lease_end + timedelta(seconds=4))
    assert use.today == 2  # the maybe-sent send kept its slot


async def test_a_delivery_that_left_its_node_no_longer_holds_the_mailbox(database: db.Database) -> None:
    account = await make(database, "a", min_gap=3)
    delivery = await leased_delivery(database, "n1", NOW + timedelta(minutes=5))
    await accounts.reserve(database, account, NOW, Fixed(0.0), delivery=delivery, node="n1")
    # Another node holds the delivery now (its lease was taken over): the send is gone
    # since the delivery last changed.
    changed = NOW + timedelta(seconds=10)
    await query(database, "UPDATE deliveries SET lease_owner = 'n2', updated_at = $1", changed)
    assert await answer(database, account, changed + timedelta(seconds=2.9), settle=False) is Answer.SKIPPED_GAP
    assert await answer(database, account, changed + timedelta(seconds=3)) is Answer.RESERVED


async def test_a_send_reserved_outside_delivery_holds_its_mailbox_for_fifteen_minutes_at_most(
    database: db.Database,
) -> None:
    account = await make(database, "a", min_gap=60)
    assert await answer(database, account, NOW, settle=False) is Answer.RESERVED
    gone = NOW + timedelta(minutes=15)
    assert await answer(database, account, gone - timedelta(seconds=1), settle=False) is Answer.SKIPPED_SENDING
    assert await answer(database, account, gone + timedelta(seconds=59), settle=False) is Answer.SKIPPED_GAP
    assert await answer(database, account, gone + timedelta(seconds=60)) is Answer.RESERVED


async def test_sends_overlap_on_an_account_without_a_gap(database: db.Database) -> None:
    account = await make(database, "a", daily_cap=3)
    for _ in range(3):
        assert await answer(database, account, NOW, settle=False) is Answer.RESERVED
    assert await answer(database, account, NOW, settle=False) is Answer.SKIPPED_DAILY_LIMIT


async def test_the_limits_are_checked_at_postgresqls_clock_unless_a_time_is_given(database: db.Database) -> None:
    account = await make(database, "a", min_gap=3600)
    [before] = await query(database, "SELECT clock_timestamp() AS at")
    decision = await accounts.reserve(database, account, None, Fixed(0.0))
    [after] = await query(database, "SELECT clock_timestamp() AS at")
    assert decision.answer is Answer.RESERVED
    assert decision.reservation is not None
    assert decision.reserved_at is not None
    assert before["at"] <= decision.reserved_at <= after["at"]
    assert await accounts.confirm(database, decision.reservation)  # settled at PostgreSQL's clock too
    [row] = await query(database, "SELECT settled_at FROM account_reservations")
    assert decision.reserved_at <= row["settled_at"]
    refused = await accounts.reserve(database, account, None, Fixed(0.0))
    assert (refused.answer, refused.retry_at) == (Answer.SKIPPED_GAP, row["settled_at"] + timedelta(hours=1))


async def test_recipients_count_against_the_daily_cap_and_a_send_gets_what_is_left(database: db.Database) -> None:
    account = await make(database, "a", daily_cap=30)
    first = await accounts.reserve(database, account, NOW, Fixed(0.0), want=20)
    assert (first.answer, first.granted) == (Answer.RESERVED, 20)
    second = await accounts.reserve(database, account, NOW, Fixed(0.0), want=20)
    assert (second.answer, second.granted) == (Answer.RESERVED, 10)  # the day's last ten
    refused = await accounts.reserve(database, account, NOW, Fixed(0.0), want=1)
    assert refused.answer is Answer.SKIPPED_DAILY_LIMIT
    [use] = await accounts.usage(database, NOW)
    assert use.today == 30
    assert second.reservation is not None
    assert await accounts.release(database, second.reservation)  # its ten recipients are free again
    [use] = await accounts.usage(database, NOW)
    assert use.today == 20
    assert (await accounts.reserve(database, account, NOW, Fixed(0.0), want=50)).granted == 10


@pytest.mark.parametrize(
    ("field", "width"),
    [("per_second", timedelta(seconds=1)), ("per_minute", timedelta(minutes=1)), ("per_hour", timedelta(hours=1))],
)
async def test_recipients_count_against_the_rate_caps(database: db.Database, field: str, width: timedelta) -> None:
    account = await make(database, "a", **{field: 5})
    assert (await accounts.reserve(database, account, NOW, Fixed(0.0), want=3)).granted == 3
    assert (await accounts.reserve(database, account, NOW + width / 4, Fixed(0.0), want=3)).granted == 2
    refused = await accounts.reserve(database, account, NOW + width / 2, Fixed(0.0), want=1)
    # One recipient fits again once the first send's three have left the window.
    assert (refused.answer, refused.retry_at) == (Answer.SKIPPED_RATE, NOW + width)
    again = await accounts.reserve(database, account, NOW + width, Fixed(0.0), want=9)
    assert (again.answer, again.granted) == (Answer.RESERVED, 3)


async def test_choose_many_gives_each_send_the_recipients_its_account_allows(database: db.Database) -> None:
    await make(database, "a0", daily_cap=3)
    await make(database, "a1", daily_cap=3)
    wants = [choosing.Want(20), choosing.Want(20), choosing.Want(20)]
    chosen = await choosing.choose_many(database, "p", wants, NOW, Fixed(0.0))
    assert isinstance(chosen, list)
    assert [(r.account.name, r.recipients) for r in chosen] == [("a0", 3), ("a1", 3)]
    assert isinstance(await choosing.choose_many(database, "p", wants, NOW, Fixed(0.0)), choosing.Busy)


async def sent(database: db.Database, account: int, at: datetime) -> None:
    """A send through the account at `at`, confirmed (the receiver said 250)."""
    decision = await accounts.reserve(database, account, at, random.Random(0))
    assert decision.reservation is not None
    assert await accounts.confirm(database, decision.reservation, at)


async def health(database: db.Database, name: str, at: datetime) -> int:
    [use] = [u for u in await accounts.usage(database, at) if u.account.name == name]
    return use.health


async def test_an_account_whose_health_falls_below_the_floor_rests_until_it_is_back_at_it(
    database: db.Database,
) -> None:
    account = await make(database, "a")
    box = await accounts.get(database, "a")
    assert await accounts.bounce(database, box, NOW - timedelta(hours=3), {"class": "recipient"}) is None
    await sent(database, account, NOW - timedelta(hours=2))
    await sent(database, account, NOW - timedelta(hours=1))
    await accounts.failure(database, box, NOW, {"class": "transient"}, accounts.Breaker())  # the breaker's
    assert await health(database, "a", NOW) == 75  # (2 sends + 1) / (2 sends + 1 + 1 bounce)
    assert await accounts.bounce(database, box, NOW, {"class": "recipient"}, floor=60) is None  # 60: not below
    rested = await accounts.bounce(database, box, NOW + timedelta(minutes=1), {"class": "recipient"}, floor=60)
    # Health 50 (3 / 6); back at 60 (3 / 5) once the first bounce leaves the 24 hours.
    assert rested == accounts.Rested(box, 50, NOW + timedelta(hours=21))
    stored = await accounts.get(database, "a")
    assert (stored.state, stored.state_until, stored.state_reason) == (
        State.RESTING,
        NOW + timedelta(hours=21),
        "health 50 is below the floor of 60",
    )
    [moved] = [e["data"] for e in await account_events(database) if e["kind"] == "account_state"]
    assert (moved["from"], moved["to"], moved["health"], moved["floor"]) == ("active", "resting", 50, 60)
    pool = await choosing.pool_status(database, "p", NOW + timedelta(minutes=1))
    assert (pool.paused, pool.next_free) == (True, NOW + timedelta(hours=21))
    before = NOW + timedelta(hours=21) - timedelta(milliseconds=1)
    assert await answer(database, account, before) is Answer.SKIPPED_COOLDOWN
    back = await choosing.choose_healthy(database, "p", [choosing.Want(1)], NOW + timedelta(hours=21),
                                         random.Random(0), floor=60)  # fmt: skip
    assert ([r.lapsed for r in back.reservations], back.rested) == ([State.RESTING], [])


async def test_the_recovery_waits_for_the_sends_that_leave_the_window_too(database: db.Database) -> None:
    account = await make(database, "a")
    box = await accounts.get(database, "a")
    await sent(database, account, NOW - timedelta(hours=3))
    await accounts.bounce(database, box, NOW - timedelta(hours=2), {"class": "recipient"})
    await accounts.bounce(database, box, NOW - timedelta(hours=1), {"class": "recipient"})
    rested = await accounts.bounce(database, box, NOW, {"class": "recipient"}, floor=50)
    # 2 / 5 = 40 now; when the send leaves, 1 / 4; then 1 / 3, 1 / 2 (50) when two bounces have.
    assert rested == accounts.Rested(box, 40, NOW + timedelta(hours=23))


async def test_choose_rests_an_unhealthy_account_when_its_turn_comes_and_reserves_another(
    database: db.Database,
) -> None:
    sick, well = await make(database, "a0"), await make(database, "a1")
    box = await accounts.get(database, "a0")
    await accounts.bounce(database, box, NOW - timedelta(hours=1), {"class": "recipient", "via": "inbox"})
    await accounts.bounce(database, box, NOW, {"class": "recipient", "via": "inbox"})  # no floor given: active
    unjudged = await choosing.choose_healthy(database, "p", [choosing.Want(1)], NOW, Fixed(0.0))
    assert [r.account.id for r in unjudged.reservations] == [sick]  # floor 0: health is not judged
    await query(database, "DELETE FROM account_reservations")  # as if that send never was
    chosen = await choosing.choose_healthy(database, "p", [choosing.Want(1)] * 2, NOW, Fixed(0.0), floor=50)
    assert [(r.account.name, r.health, r.until) for r in chosen.rested] == [("a0", 33, NOW + timedelta(hours=23))]
    assert chosen.rested[0].account.state is State.ACTIVE  # as it was
    assert [r.account.id for r in chosen.reservations] == [well, well]  # least used first, among the healthy
    assert (await accounts.get(database, "a0")).state is State.RESTING
    again = await choosing.choose_healthy(database, "p", [choosing.Want(1)], NOW, Fixed(0.0), floor=50)
    assert (again.rested, [r.account.id for r in again.reservations]) == ([], [well])
    await accounts.disable(database, "a1", "holiday", NOW)
    busy = await choosing.choose_healthy(database, "p", [choosing.Want(1)], NOW, Fixed(0.0), floor=50)
    assert (busy.reservations, busy.rested, busy.contended) == ([], [], False)
    assert isinstance(await choosing.choose_many(database, "p", [choosing.Want(1)], NOW, Fixed(0.0)), choosing.Busy)


async def test_an_operators_enable_starts_an_accounts_health_afresh(database: db.Database) -> None:
    account = await make(database, "a")
    box = await accounts.get(database, "a")
    await accounts.bounce(database, box, NOW - timedelta(minutes=1), {"class": "recipient"}, floor=50)
    assert await accounts.bounce(database, box, NOW, {"class": "recipient"}, floor=50) is not None
    assert await health(database, "a", NOW) == 33
    await accounts.enable(database, "a", "list cleaned", NOW + timedelta(minutes=1))
    assert await health(database, "a", NOW + timedelta(minutes=1)) == 100
    chosen = await choosing.choose_healthy(database, "p", [choosing.Want(1)], NOW + timedelta(minutes=1),
                                           Fixed(0.0), floor=50)  # fmt: skip
    assert ([r.account.id for r in chosen.reservations], chosen.rested) == ([account], [])
    later = NOW + timedelta(minutes=2)
    assert await accounts.bounce(database, box, later, {"class": "recipient"}, floor=50) is None  # 1 / 2: 50
    assert await health(database, "a", later) == 50


async def test_a_complaint_about_relayed_mail_lowers_its_accounts_health(database: db.Database) -> None:
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings())])
    await counting.catch_up()
    await make(database, "box")
    message = uuid.uuid4()
    for kind, data in (("delivered", {"group": "gmail", "source": "192.0.2.9", "account": "box"}),
                       ("complained", {"recipient": "r@example.net", "feedback_type": "abuse"})):  # fmt: skip
        await query(database, "INSERT INTO events (at, kind, tenant, message, delivery, data) "
                              "VALUES (now(), $1, 'shop', $2, 7, $3::jsonb)",
                    kind, message, json.dumps(data))  # fmt: skip
    await counting.catch_up()
    [bounce] = [e for e in await account_events(database) if e["kind"] == "account_bounce"]
    assert (bounce["data"]["name"], bounce["data"]["complaint"]) == ("box", True)
    assert await health(database, "box", datetime.now(UTC)) == 50


async def account_events(database: db.Database) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT kind, data FROM events WHERE kind LIKE 'account%' ORDER BY id")
    return [{"kind": r["kind"], "data": json.loads(r["data"])} for r in rows]

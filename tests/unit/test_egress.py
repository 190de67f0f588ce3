"""Source IP pools: policies, health, warm-up caps and days, fallback, settings.

An injected clock and a seeded random generator; nothing sleeps.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from mtad.base import errors
from mtad.base.replies import Reply
from mtad.deliver import egress, strategies
from mtad.deliver import pools as source_pools
from mtad.deliver.egress import Egress, Granted, Policy, PoolSettings, SendOutcome, Wanted
from mtad.deliver.warmup import DAY, Warmup
from mtad.outbound import outcomes

START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()
A, B, C = "192.0.2.1", "192.0.2.2", "192.0.2.3"
W = "192.0.2.9"  # a new address, warming up


class Clock:
    def __init__(self, t: float = START) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def make(*pools: PoolSettings, clock: Clock | None = None, seed: int = 7) -> Egress:
    """Pools whose every address this node holds a lease on (as a take would give it,
    tests/integration/test_source_leases.py takes them from PostgreSQL)."""
    e = Egress({p.name: p for p in pools}, now=clock or Clock(), rng=random.Random(seed))
    for pool in pools:
        for address in pool.addresses:
            e.granted(pool.name, Granted(address, None, {}))
    return e


def providers_at(index: int, count: int) -> Iterator[str]:
    """Provider names that a sticky pool of `count` addresses starts on addresses[index]."""
    return (f"p{i}" for i in range(10_000) if zlib.crc32(f"p{i}".encode()) % count == index)


def send(e: Egress, pool: str, provider: str, times: int = 1) -> list[egress.Choice]:
    """Choose and count `times` sends, as the delivery path does."""
    choices = []
    for _ in range(times):
        choice = e.choose(pool, provider)
        e.taken(pool, provider, choice)
        e.sent(pool, provider, choice.address)
        choices.append(choice)
    return choices


def throttle(e: Egress, pool: str, provider: str, address: str, times: int = 3) -> list[bool]:
    return [e.report(pool, provider, address, SendOutcome.THROTTLED) for _ in range(times)]


# --- sticky


def test_sticky_keeps_one_address_per_provider() -> None:
    e = make(PoolSettings("p", (A, B, C)))
    for provider in ("gmail", "microsoft", "yahoo", "mx:mail.example.org"):
        chosen = {c.address for c in send(e, "p", provider, 20)}
        assert chosen == {(A, B, C)[zlib.crc32(provider.encode()) % 3]}
    assert all(not c.fallback and c.why is None for c in send(e, "p", "gmail", 5))


def test_sticky_moves_off_an_unhealthy_address_and_stays_on_the_new_one() -> None:
    clock = Clock()
    e = make(PoolSettings("p", (A, B, C), cool_off=600), clock=clock)
    first, other = list(providers_at(0, 3))[:2]  # both start on A
    assert send(e, "p", first)[0].address == A
    assert throttle(e, "p", first, A) == [False, False, True]  # the third in a row makes it unhealthy
    assert {c.address for c in send(e, "p", first, 5)} == {B}  # the next address, kept
    assert send(e, "p", other)[0].address == A  # health is per provider
    clock.advance(600)  # A is healthy again; the provider stays where it went
    assert send(e, "p", first)[0].address == B
    assert e.statistics().pools[0].addresses[0].unhealthy_until == {}


def test_a_permanent_refusal_of_the_sender_is_a_strike() -> None:
    e = make(PoolSettings("p", (A, B), unhealthy_after=2))
    provider = next(providers_at(0, 2))
    assert e.report("p", provider, A, SendOutcome.REFUSED) is False
    assert e.report("p", provider, A, SendOutcome.REFUSED) is True  # a blocked address rests like a throttled one
    assert e.choose("p", provider).address == B


def test_a_blocked_reply_tells_the_source_address_and_a_missing_mailbox_does_not() -> None:
    rules = outcomes.shipped()
    blocked = Reply(550, "5.7.1", "Service unavailable; client host [192.0.2.1] blocked using zen.spamhaus.org")
    gone = Reply(550, "5.1.1", "No such user")
    said = strategies.Feedback.of(None, {1: (rules.classify(blocked, "RCPT"), blocked)})
    assert (said.refused, said.outcome) == (True, SendOutcome.REFUSED)
    said = strategies.Feedback.of(None, {1: (rules.classify(gone, "RCPT"), gone)})
    assert (said.refused, said.outcome) == (False, None)  # the recipient's fault: nothing against the address


def test_a_delivery_breaks_a_run_of_strikes_and_connect_failures_count() -> None:
    e = make(PoolSettings("p", (A, B), unhealthy_after=2))
    provider = next(providers_at(0, 2))
    assert e.report("p", provider, A, SendOutcome.THROTTLED) is False
    assert e.report("p", provider, A, SendOutcome.DELIVERED) is False
    assert e.report("p", provider, A, SendOutcome.CONNECT_FAILED) is False
    assert e.report("p", provider, A, SendOutcome.DEFERRED) is False  # not a strike, and not a reset
    assert e.choose("p", provider).address == A
    assert e.report("p", provider, A, SendOutcome.CONNECT_FAILED) is True
    assert e.choose("p", provider).address == B


def test_a_delivery_does_not_end_a_cool_off() -> None:
    e = make(PoolSettings("p", (A, B), unhealthy_after=1))
    provider = next(providers_at(0, 2))
    e.report("p", provider, A, SendOutcome.THROTTLED)
    e.report("p", provider, A, SendOutcome.DELIVERED)  # a send that was already in flight
    assert e.choose("p", provider).address == B


# --- choosing changes nothing until the send goes


@pytest.mark.parametrize("policy", [p for p in Policy if p is not Policy.ROTATE])
def test_choosing_changes_nothing_until_the_send_is_taken(policy: Policy) -> None:
    e = make(PoolSettings("p", (A, B, C), policy=policy))
    before = e.statistics()
    first = e.choose("p", "gmail")
    again = [e.choose("p", "gmail") for _ in range(5)]  # the bucket refused it: no turn spent
    assert all(choice == first for choice in again)
    assert e.statistics() == before
    other = e.choose("p", "gmail", excluding=frozenset({first.address}))
    assert other.address != first.address
    assert not other.fallback
    assert e.choose("p", "gmail", excluding=frozenset({A, B, C})).fallback  # nothing left but the primary
    e.taken("p", "gmail", other)
    e.sent("p", "gmail", other.address)
    if policy is Policy.STICKY:
        assert e.choose("p", "gmail").address == other.address  # the policy moved on to it


# --- round-robin and least-used


def test_round_robin_cycles_per_provider_and_skips_an_unhealthy_address() -> None:
    e = make(PoolSettings("p", (A, B, C), policy=Policy.ROUND_ROBIN, unhealthy_after=1))
    assert [c.address for c in send(e, "p", "gmail", 7)] == [A, B, C, A, B, C, A]
    assert [c.address for c in send(e, "p", "yahoo", 2)] == [A, B]  # a cursor of its own
    e.report("p", "gmail", C, SendOutcome.THROTTLED)
    assert [c.address for c in send(e, "p", "gmail", 4)] == [B, A, B, A]


def test_least_used_picks_the_fewest_sends_to_the_provider_today() -> None:
    clock = Clock()
    e = make(PoolSettings("p", (A, B, C), policy=Policy.LEAST_USED), clock=clock)
    assert e.choose("p", "gmail").address == A  # a tie: the first
    for address, times in ((A, 3), (B, 1), (C, 2)):
        for _ in range(times):
            e.sent("p", "gmail", address)
    for _ in range(5):
        e.sent("p", "yahoo", B)  # other providers do not count
    assert e.choose("p", "gmail").address == B
    e.sent("p", "gmail", B, count=2)  # B: 3, C: 2
    assert e.choose("p", "gmail").address == C
    assert [c.address for c in send(e, "p", "gmail", 4)] == [C, A, B, C]
    clock.advance(DAY)  # a new UTC day: counts start again
    assert e.choose("p", "gmail").address == A
    assert e.statistics().pools[0].addresses[0].sent_today == 0


# --- leases (the PostgreSQL side: tests/integration/test_source_leases.py)


def test_an_address_is_chosen_only_once_leased() -> None:
    e = Egress({"p": PoolSettings("p", (A, B))}, now=Clock())
    provider = next(providers_at(1, 2))  # sticky on B
    assert e.choose("p", provider) == Wanted("p", B)
    e.granted("p", Granted(B, None, {}))
    assert e.choose("p", provider).address == B
    assert e.kept("p", [A]) == [B]  # a renewal found it lost: leased again before the next send
    assert e.choose("p", provider) == Wanted("p", B)


def test_a_rotate_pool_sends_its_turn_then_its_lease_is_spent() -> None:
    clock = Clock()
    e = Egress({"p": PoolSettings("p", (A, B, C), policy=Policy.ROTATE, unhealthy_after=1)}, now=clock)
    assert e.choose("p", "gmail") == Wanted("p", None)  # no turn yet: ask for one
    e.report("p", "yahoo", C, SendOutcome.THROTTLED)
    assert e.choose("p", "yahoo") == Wanted("p", None, frozenset({C}))  # not a turn of C for yahoo
    e.granted("p", Granted(B, 2, {A: START + 60}))
    first = send(e, "p", "gmail")[0]
    assert (first.address, first.fallback) == (B, False)
    assert e.ended("p", B) is False  # one send of the turn left
    send(e, "p", "gmail")
    assert e.statistics().pools[0].addresses[1].turn_left == 0
    assert e.choose("p", "gmail") == Wanted("p", None, frozenset({A}))  # the turn is given out; A rests
    assert e.ended("p", B) is True  # the last send of the turn ended: release the lease
    assert e.leases() == {}


def test_a_rotate_pool_with_no_turn_to_give_falls_back_until_it_asks_again() -> None:
    clock = Clock()
    e = Egress({"p": PoolSettings("p", (A, B), policy=Policy.ROTATE, park=600)}, now=clock)
    e.granted("p", Granted(None, None, {A: START + 3, B: START + 600}))  # both resting
    assert e.choose("p", "gmail") == Wanted("p", A)  # the fallback, the primary, leased without a count
    e.granted("p", Granted(A, None, {A: START + 3, B: START + 600}))
    choice = e.choose("p", "gmail")
    assert (choice.address, choice.fallback) == (A, True)
    assert choice.why == (
        f"no address of pool p can send to gmail now ({A} parked for 3s more; {B} parked for 600s more);"
        f" fell back to the primary {A}"
    )
    clock.advance(3)  # the first rest is over: ask for a turn again
    assert e.choose("p", "gmail") == Wanted("p", None, frozenset({B}))


# --- warm-up


def test_the_cap_grows_geometrically_up_to_the_target() -> None:
    schedule = Warmup()
    assert [schedule.cap(d) for d in (1, 2, 3, 4)] == [50, 75, 112, 169]
    assert schedule.cap(19) == round(50 * 1.5**18) < 100_000
    assert schedule.cap(20) == schedule.cap(500) == 100_000
    assert (schedule.warm(19), schedule.warm(20)) == (False, True)
    assert Warmup(growth=10.0).cap(10_000) == 100_000  # no overflow


def warming_pool(**overrides: Any) -> PoolSettings:
    fields: dict[str, Any] = {
        "name": "p",
        "addresses": (W, A),
        "warming": frozenset({W}),
        "warmup": Warmup(start=5, growth=2.0, target=40),
        "ehlo": {W: "new.example.com"},
        "ehlo_default": "mta.example.com",
    }
    fields.update(overrides)
    return PoolSettings(**fields)


def test_a_full_warming_address_spills_to_a_warm_one() -> None:
    e = make(warming_pool())
    provider, other = list(providers_at(0, 2))[:2]  # sticky on W
    first = send(e, "p", provider, 5)
    assert [(c.address, c.ehlo, c.fallback, c.why) for c in first] == [(W, "new.example.com", False, None)] * 5
    spilled = send(e, "p", provider, 3)
    assert [(c.address, c.ehlo, c.fallback) for c in spilled] == [(A, "mta.example.com", False)] * 3
    assert spilled[0].why == f"{W} is at its warm-up cap of 5 sends to {provider} today; spilled to {A}"
    assert send(e, "p", other)[0].address == W  # the cap is per provider
    [stats] = e.statistics().pools
    assert (stats.spills, stats.fallbacks) == (3, 0)
    w = stats.addresses[0]
    assert (w.warming, w.sent_today, w.sent_today_by_provider) == (True, 6, {provider: 5, other: 1})
    assert [(s.provider, s.day, s.cap, s.sent) for s in w.warmup] == sorted([(provider, 1, 5, 5), (other, 1, 5, 1)])


def test_a_spill_prefers_a_warm_address_over_another_warming_one() -> None:
    e = make(warming_pool(addresses=(W, B, A), warming=frozenset({W, B}), policy=Policy.ROUND_ROBIN))
    for _ in range(5):
        e.sent("p", "gmail", W)
    assert e.choose("p", "gmail").address == A  # W is full: A, not B
    e.taken("p", "gmail", e.choose("p", "gmail"))
    for _ in range(3):
        e.report("p", "gmail", A, SendOutcome.CONNECT_FAILED)
    assert e.choose("p", "gmail").address == B  # B's turn
    e.taken("p", "gmail", e.choose("p", "gmail"))
    spilled = e.choose("p", "gmail")  # A is unhealthy, W's turn: W is full, and B still has room
    assert (spilled.address, spilled.why) == (B, f"{W} is at its warm-up cap of 5 sends to gmail today; spilled to {B}")


def test_when_nothing_is_eligible_the_primary_is_used_and_the_reason_given() -> None:
    e = make(warming_pool())
    provider = next(providers_at(0, 2))
    for _ in range(5):
        e.sent("p", provider, W)
    throttle(e, "p", provider, A)
    choice = e.choose("p", provider)
    e.taken("p", provider, choice)
    assert (choice.address, choice.ehlo, choice.fallback) == (W, "new.example.com", True)
    assert choice.why == (
        f"no address of pool p can send to {provider} now ({W} at its warm-up cap of 5 to {provider};"
        f" {A} unhealthy at {provider} for 600s more); fell back to the primary {W}"
    )
    assert e.statistics().pools[0].fallbacks == 1


def test_every_policy_falls_back_when_every_address_is_unhealthy() -> None:
    for policy in (p for p in Policy if p is not Policy.ROTATE):  # rotate: test_source_leases.py
        e = make(PoolSettings("p", (A, B), policy=policy, unhealthy_after=1))
        for address in (A, B):
            e.report("p", "gmail", address, SendOutcome.THROTTLED)
        choice = e.choose("p", "gmail")
        assert (choice.address, choice.fallback) == (A, True), policy
        assert choice.why == (
            f"no address of pool p can send to gmail now ({A} unhealthy at gmail for 600s more;"
            f" {B} unhealthy at gmail for 600s more); fell back to the primary {A}"
        )


def test_several_nodes_share_a_cap() -> None:
    e = make(warming_pool(warmup=Warmup(start=10, growth=2.0, target=1000)))
    e.set_nodes(3)
    provider = next(providers_at(0, 2))
    assert [c.address for c in send(e, "p", provider, 4)] == [W, W, W, A]  # 10 // 3
    e.set_nodes(20)
    assert e.statistics().pools[0].addresses[0].warmup[0].cap == 1  # never below one


def test_a_day_advances_when_the_rates_stayed_under_the_thresholds() -> None:
    clock = Clock()
    e = make(warming_pool(warmup=Warmup(start=10, growth=2.0, target=1000)), clock=clock)
    provider = next(providers_at(0, 2))
    assert [c.address for c in send(e, "p", provider, 11)] == [W] * 10 + [A]
    e.report("p", provider, W, SendOutcome.DEFERRED)  # 10%: not under 0.10
    e.report("p", provider, A, SendOutcome.DEFERRED)  # a warm address has no warm-up day
    assert e.advance_days(START + DAY - 1) == []  # not 24 h yet
    clock.advance(DAY + 5)
    [ended] = e.advance_days(clock())
    assert (ended.day, ended.next_day, ended.sent, ended.deferred, ended.warm) == (1, 1, 10, 1, False)
    assert ended.why == "deferral rate 0.100 is not under 0.1"
    [row] = e.days.state()
    assert (row.day, row.day_started, row.sent, row.deferred) == (1, START + DAY, 0, 0)  # aligned, counts reset
    assert [c.address for c in send(e, "p", provider, 11)] == [W] * 10 + [A]  # day 1 again: the same cap
    e.report("p", provider, W, SendOutcome.THROTTLED)  # throttling counts as a deferral: 1 in 10 again...
    clock.advance(DAY)
    assert e.advance_days(clock())[0].next_day == 1
    send(e, "p", provider, 10)  # ...and a clean day advances
    clock.advance(DAY)
    [ended] = e.advance_days(clock())
    assert (ended.day, ended.next_day, ended.why) == (1, 2, None)
    assert [c.address for c in send(e, "p", provider, 21)] == [W] * 20 + [A]  # day 2: 20


def test_a_day_with_complaints_over_the_threshold_does_not_advance() -> None:
    clock = Clock()
    e = make(warming_pool(warmup=Warmup(start=100, growth=2.0, target=1000, max_complaint_rate=0.01)), clock=clock)
    provider = next(providers_at(0, 2))
    send(e, "p", provider, 100)
    assert e.days.hearing() == [(W, provider, START)]
    e.days.heard(W, provider, START, 1)  # 1%: not under 1%
    e.days.heard(W, provider, START, 0)  # a count heard again never goes down
    clock.advance(DAY)
    [ended] = e.advance_days(clock())
    assert (ended.next_day, ended.complaints, ended.why) == (1, 1, "complaint rate 0.0100 is not under 0.01")
    send(e, "p", provider, 200)
    e.days.heard(W, provider, START, 5)  # of the day that ended: too late for it, and not this day's
    e.days.heard(W, provider, START + DAY, 1)  # 1 in 100 sent on this day (the cap): refused again
    e.report("p", provider, W, SendOutcome.DELIVERED)
    clock.advance(DAY)
    [ended] = e.advance_days(clock())
    assert (ended.next_day, ended.complaints) == (1, 1)
    send(e, "p", provider, 100)
    clock.advance(DAY)  # a day without complaints advances
    assert e.advance_days(clock())[0].next_day == 2


def test_each_node_answers_for_its_share_of_the_complaints() -> None:
    clock = Clock()
    e = make(warming_pool(warmup=Warmup(start=100, growth=2.0, target=1000, max_complaint_rate=0.01)), clock=clock)
    e.set_nodes(2)  # each sends 50, and the 1 complaint heard is of the 100 both sent
    provider = next(providers_at(0, 2))
    send(e, "p", provider, 50)
    e.days.heard(W, provider, START, 1)
    clock.advance(DAY)
    [ended] = e.advance_days(clock())
    assert (ended.next_day, ended.complaints, ended.why) == (1, 1, "complaint rate 0.0100 is not under 0.01")
    send(e, "p", provider, 50)
    clock.advance(DAY)
    assert e.advance_days(clock())[0].next_day == 2
    assert e.days.hearing() == [(W, provider, START + 2 * DAY)]


def test_a_day_without_sends_does_not_advance() -> None:
    clock = Clock()
    e = make(warming_pool(), clock=clock)
    e.report("p", "gmail", W, SendOutcome.DEFERRED)  # a day starts even so (a late report)
    clock.advance(3 * DAY + 10)  # three days with no node running
    [ended] = e.advance_days(clock())
    assert (ended.day, ended.next_day, ended.sent, ended.why) == (1, 1, 0, "no sends")
    [row] = e.days.state()
    assert row.day_started == START + 3 * DAY


def test_an_address_that_reaches_the_target_stops_warming() -> None:
    clock = Clock()
    e = make(warming_pool(), clock=clock)  # 5, 10, 20, then 40 = the target
    provider = next(providers_at(0, 2))
    for day, cap in ((1, 5), (2, 10), (3, 20)):
        assert [c.address for c in send(e, "p", provider, cap + 1)] == [W] * cap + [A], day
        clock.advance(DAY)
        [ended] = e.advance_days(clock())
        assert (ended.day, ended.next_day, ended.warm) == (day, day + 1, day == 3)
    assert {c.address for c in send(e, "p", provider, 100)} == {W}  # no cap any more
    [row] = e.days.state()
    assert (row.day, row.sent) == (4, 0)
    assert e.statistics().pools[0].addresses[0].warmup[0].cap is None
    clock.advance(DAY)
    assert e.advance_days(clock()) == []  # a warm address has no more days


# --- errors and settings


def test_an_unknown_pool_or_an_address_of_another_pool_is_an_error() -> None:
    e = make(PoolSettings("transactional", (A,)), PoolSettings("bulk", (B,)))
    with pytest.raises(errors.ConfigError) as info:
        e.choose("marketing", "gmail")
    assert info.value.problems == ("unknown source IP pool 'marketing' (configured pools: bulk, transactional)",)
    with pytest.raises(errors.ConfigError, match=f"{A} is not an address of source IP pool 'bulk'"):
        e.sent("bulk", "gmail", A)
    with pytest.raises(errors.ConfigError, match="is also in"):
        make(PoolSettings("transactional", (A,)), PoolSettings("bulk", (B, A)))


REFERENCE = {
    "transactional": {
        "addresses": ["192.0.2.1", "2001:db8::0001"],
        "ehlo": {"2001:DB8::1": "tx6.example.com"},
        "ehlo_default": "tx.example.com",
    },
    "bulk": {
        "addresses": ["198.51.100.1", "198.51.100.2", "198.51.100.3"],
        "policy": "rotate",
        "rotate_after": [8, 15],
        "park": "1h30m",
        "warming": ["198.51.100.3"],
        "warmup_start": 100,
        "warmup_growth": 2,
        "warmup_target": 50_000,
        "warmup_max_deferral_rate": 0.05,
        "warmup_max_complaint_rate": 0.001,
        "unhealthy_after": 5,
        "cool_off": "15m",
    },
}


def test_parse_pools() -> None:
    problems: list[str] = []
    pools = source_pools.parse(REFERENCE, problems)
    assert problems == []
    assert pools["transactional"] == PoolSettings(
        "transactional", ("192.0.2.1", "2001:db8::1"), ehlo={"2001:db8::1": "tx6.example.com"},
        ehlo_default="tx.example.com",
    )  # fmt: skip
    assert pools["bulk"] == PoolSettings(
        "bulk",
        ("198.51.100.1", "198.51.100.2", "198.51.100.3"),
        policy=Policy.ROTATE,
        rotate_after=(8, 15),
        park=5400.0,
        warming=frozenset({"198.51.100.3"}),
        warmup=Warmup(100, 2.0, 50_000, 0.05, 0.001),
        unhealthy_after=5,
        cool_off=900.0,
    )
    assert pools["transactional"].ehlo_for("192.0.2.1") == "tx.example.com"
    assert source_pools.parse({"p": {"addresses": [A], "ehlo_default": ""}}, problems)["p"].ehlo_default is None
    assert source_pools.parse({"p": {"addresses": [A], "park": 90}}, problems) == {}
    assert problems == ['[pools.p] park: only used with policy = "rotate" (this pool is "sticky")']


def problems_of(raw: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    assert source_pools.parse(raw, problems) == {}
    return problems


def test_parse_pools_names_every_bad_key() -> None:
    assert problems_of(
        {
            "bulk": {
                "addresses": ["198.51.100.1", "not-an-ip"],
                "policy": "random",
                "rotate_after": [5, 2],
                "park": "30 minutes",
                "ehlo": {"198.51.100.1": "bad_name"},
                "ehlo_default": 7,
                "warming": "198.51.100.1",
                "warmup_start": 0,
                "warmup_growth": 1.0,
                "warmup_target": "lots",
                "warmup_max_deferral_rate": 10,
                "warmup_max_complaint_rate": True,
                "unhealthy_after": 0,
                "cool_off": "-5m",
                "polcy": "sticky",
            }
        }
    ) == [
        "[pools.bulk] addresses: 'not-an-ip' is not an IP address",
        '[pools.bulk] policy: expected one of "sticky", "round-robin", "least-used", "rotate", got \'random\'',
        "[pools.bulk] rotate_after: expected two integers [low, high] with 1 <= low <= high, got [5, 2]",
        '[pools.bulk] park: expected a duration such as "250ms", "30s", "5m", "2h" or "7d", got \'30 minutes\'',
        "[pools.bulk] ehlo: 'bad_name' is not a valid host name",
        "[pools.bulk] ehlo_default: 7 is not a valid host name",
        "[pools.bulk] warming: expected a list of IP addresses such as [\"192.0.2.10\"], got '198.51.100.1'",
        "[pools.bulk] warmup_start: must be between 1 and 10000000, got 0",
        "[pools.bulk] warmup_growth: must be more than 1.0 and at most 10.0, got 1.0",
        "[pools.bulk] warmup_target: expected a whole number, got 'lots'",
        "[pools.bulk] warmup_max_deferral_rate: must be more than 0.0 and at most 1.0, got 10",
        "[pools.bulk] warmup_max_complaint_rate: expected a fraction such as 0.003 (0.3%), got True",
        "[pools.bulk] unhealthy_after: must be between 1 and 1000, got 0",
        '[pools.bulk] cool_off: expected a duration such as "250ms", "30s", "5m", "2h" or "7d", got \'-5m\'',
        "[pools.bulk] polcy: unknown key (did you mean 'policy'?)",
    ]


def test_parse_pools_checks_across_keys_and_pools() -> None:
    assert problems_of({"bulk": {"addresses": [A, B], "warming": [C], "ehlo": {W: "mta.example.com"}}}) == [
        f"[pools.bulk] warming: {C} is not one of the pool's addresses",
        f"[pools.bulk] ehlo: {W} is not one of the pool's addresses",
    ]
    assert problems_of({"bulk": {"policy": "sticky"}}) == [
        "[pools.bulk] addresses: missing; list the pool's source IP addresses, the primary first"
    ]
    assert problems_of({"bulk": {"addresses": []}}) == [
        "[pools.bulk] addresses: must list at least one address (the first is the pool's primary)"
    ]
    assert problems_of({"bulk": {"addresses": ["2001:db8::1", "2001:DB8::0001"]}}) == [
        "[pools.bulk] addresses: 2001:db8::1 is listed twice"
    ]
    assert problems_of({"bulk": {"addresses": [A], "warmup_start": 500, "warmup_target": 500}}) == [
        "[pools.bulk] warmup_target: must be larger than warmup_start (500), got 500"
    ]
    assert problems_of({"bulk": {"addresses": [A], "policy": "round-robin", "rotate_after": [1, 2]}}) == [
        '[pools.bulk] rotate_after: only used with policy = "rotate" (this pool is "round-robin")'
    ]
    assert problems_of({"bulk": {"addresses": [A], "policy": "rotate", "rotate_after": [0, 3]}}) == [
        "[pools.bulk] rotate_after: expected two integers [low, high] with 1 <= low <= high, got [0, 3]"
    ]
    assert problems_of({"bad name": {"addresses": [A]}, "x": "not a table"}) == [
        "[pools.bad name]: a pool name is 1-64 letters, digits, '.', '_' or '-'",
        "[pools.x]: expected a table of pool settings",
    ]
    problems: list[str] = []
    pools = source_pools.parse({"transactional": {"addresses": [A]}, "bulk": {"addresses": [B, A]}}, problems)
    assert list(pools) == ["transactional"]
    assert problems == [
        f"[pools.bulk] addresses: {A} is also in [pools.transactional]; an address belongs to one pool"
        " (its reputation is the pool's)"
    ]

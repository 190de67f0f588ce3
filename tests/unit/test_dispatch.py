"""Dispatch: the ready queues and the permission step, on an injected clock.

No database and no sockets: the shaper, the source pools and the queues are the
real ones, and each decision is asked of `Dispatch.next` as the dispatcher asks it.
"""

from __future__ import annotations

import itertools
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mtad.deliver import dispatch, egress, shaping, strategies
from mtad.deliver.egress import Granted, Policy, PoolSettings
from mtad.deliver.holdings import Holdings
from mtad.deliver.jobs import Group, Job, Wait
from mtad.deliver.settings import Settings
from mtad.outbound import limits, routing
from mtad.spool.leases import Leased

START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
A, B = "192.0.2.1", "192.0.2.2"
LIMITS = limits.Limits(
    rate=1.0, min_rate=0.1, max_rate=10.0, burst=1, sessions=2, min_sessions=1,
    step=1.0, factor=0.5, increase_after=10,
)  # fmt: skip
OPEN = limits.Limits(
    rate=float("inf"), min_rate=1.0, max_rate=float("inf"), burst=1000, sessions=1000, min_sessions=1,
    step=1.0, factor=0.5, increase_after=10,
)  # fmt: skip
_ids = itertools.count(1)


class Clock:
    """One clock for the dispatch (wall), the shaper (monotonic) and the pools (epoch)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return START + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return 1000.0 + self.t

    def epoch(self) -> float:
        return self.now().timestamp()

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Node:
    """A dispatch with its shaper and source pools, as the engine wires them."""

    def __init__(self, *pools: PoolSettings, settings: Settings | None = None, leased: bool = True) -> None:
        self.clock = Clock()
        self.shaper = shaping.Shaper(self.clock.monotonic, self.clock.now)
        self.egress = egress.Egress({p.name: p for p in pools}, now=self.clock.epoch, rng=random.Random(7))
        if leased:
            for pool in pools:
                for address in pool.addresses:
                    self.egress.granted(pool.name, Granted(address, None, {}))
        self.dispatch = dispatch.Dispatch(
            settings or Settings(node="n1"), Holdings(1000), self.shaper, self.egress,
            controls=None, on_probation=lambda tenant: tenant == "risky", default_source="", now=self.clock.now,
        )  # fmt: skip

    def push(self, job: Job, lim: limits.Limits = LIMITS, group: str = "google") -> Group:
        queued = self.dispatch.push(job, route(lim, group), group, None)
        assert isinstance(queued, Group)
        return queued

    def go(self, group: Group) -> dispatch.Ready:
        out = self.dispatch.next(group)
        assert isinstance(out, dispatch.Ready), out
        assert out.source is not None
        return out


def address(ready: dispatch.Ready) -> str:
    assert ready.source is not None
    return ready.source.address


def route(lim: limits.Limits = LIMITS, group: str = "google") -> routing.Route:
    return routing.Route("example.com", group, lim, (routing.Hop("mx.example.com", 10, ("127.0.0.1",), 25),))


def job(priority: int = 0, tenant: str = "t1", age: float = 0.0, domain: str = "example.com") -> Job:
    created = START - timedelta(seconds=age)
    delivery = Leased(next(_ids), uuid.uuid4(), f"r@{domain}", domain, priority, 0, 0, created, False, created)
    return Job(delivery.message, tenant, domain, [delivery], priority, created)


def test_the_highest_priority_goes_first_then_the_oldest() -> None:
    node = Node()
    late, early, urgent = job(age=10), job(age=20), job(priority=5, age=1)
    for j in (late, early, urgent):
        group = node.push(j, OPEN)
    assert [node.go(group).job for _ in range(3)] == [urgent, early, late]
    assert not group.ready


def test_a_job_waits_for_the_next_token_and_stays_first() -> None:
    node = Node()
    first, second = job(age=2), job(age=1)
    group = node.push(first)
    node.push(second)
    assert node.go(group).job is first  # the burst of one
    out = node.dispatch.next(group)
    assert out == Wait(pytest.approx(1.0))  # one token a second
    assert len(group.ready) == 1  # still queued, still first
    node.clock.advance(1.0)
    assert node.go(group).job is second


def test_a_full_session_cap_waits_until_a_send_is_answered() -> None:
    node = Node()
    two_sessions = replace(LIMITS, rate=100.0, burst=100)
    group = node.push(job(), two_sessions)
    node.push(job(), two_sessions)
    node.push(job(), two_sessions)
    one, _ = node.go(group), node.go(group)
    assert node.dispatch.next(group) == Wait(None)  # until a session ends: no timer
    assert not group.freed.is_set()
    assert one.source is not None
    assert node.dispatch.answered(group, one.source, strategies.Feedback(delivered=1)) is False
    assert group.freed.is_set()  # its dispatcher looks again
    assert node.go(group).source == one.source


def test_a_busy_address_does_not_hold_back_mail_another_address_can_send() -> None:
    node = Node(PoolSettings("main", (A, B)), settings=Settings(node="n1", default_pool="main"))
    one_session = replace(LIMITS, rate=100.0, burst=100, sessions=1)
    group = node.push(job(), one_session)
    node.push(job(), one_session)
    node.push(job(), one_session)
    first, second = node.go(group), node.go(group)
    assert {address(first), address(second)} == {A, B}  # the other address took the second
    assert node.dispatch.next(group) == Wait(None)  # both busy: until a session ends


def test_an_expired_job_leaves_its_queue_without_a_token() -> None:
    node = Node(settings=Settings(node="n1", max_age=60.0))
    group = node.push(job(age=61))
    out = node.dispatch.next(group)
    assert isinstance(out, dispatch.Ready)
    assert (out.source, out.suspended) == (None, None)  # only its bounce is recorded
    assert not group.ready
    assert node.shaper.statistics() == []  # no bucket was asked


def test_a_rotate_pool_with_no_turn_asks_for_a_source_lease_first() -> None:
    pool = PoolSettings("turns", (A, B), policy=Policy.ROTATE)
    node = Node(pool, settings=Settings(node="n1", default_pool="turns"), leased=False)
    group = node.push(job())
    out = node.dispatch.next(group)
    assert isinstance(out, egress.Wanted)
    assert out.pool == "turns"
    assert len(group.ready) == 1  # it waits in its queue for the lease


def test_the_receivers_answer_reaches_the_bucket_through_the_way_out() -> None:
    node = Node()
    fast = replace(LIMITS, rate=8.0, burst=8)
    group = node.push(job(), fast)
    ready = node.go(group)
    assert ready.source is not None
    assert ready.route is not None

    def answered(source: strategies.Source, feedback: strategies.Feedback | None) -> None:
        node.dispatch.answered(group, source, feedback)

    way = strategies.ToMx(ready.route, ready.source, random.Random(1), on_answer=answered)
    way.answered(strategies.Feedback(throttled=True))
    way.answered(None)  # once only
    (bucket,) = node.shaper.statistics()
    assert (bucket.rate, bucket.in_flight, bucket.decreases) == (4.0, 0, 1)  # halved, its session back
    assert group.freed.is_set()


def test_the_source_pool_is_the_routes_then_probations_then_the_default() -> None:
    settings = Settings(node="n1", default_pool="main", probation_pool="slow", route_pools={"special.example": "vip"})
    node = Node(settings=settings)
    assert node.dispatch.pool_of(job(domain="special.example", tenant="risky"), "google") == "vip"
    assert node.dispatch.pool_of(job(tenant="risky"), "google") == "slow"
    assert node.dispatch.pool_of(job(), "google") == "main"


def test_each_provider_group_and_source_pool_has_its_own_queue() -> None:
    settings = Settings(node="n1", default_pool="main", route_pools={"other.example": "second"})
    node = Node(PoolSettings("main", (A,)), PoolSettings("second", (B,)), settings=settings)
    main = node.push(job())
    second = node.push(job(domain="other.example"))
    again = node.push(job())
    assert main is again
    assert main is not second
    assert sorted(node.dispatch.groups) == [("google", "main"), ("google", "second")]
    assert (address(node.go(main)), address(node.go(second))) == (A, B)


def test_an_account_pools_jobs_leave_best_first_to_seek_their_reservations() -> None:
    node = Node()
    newsletter, receipt = job(age=5), job(priority=5)
    group = node.dispatch.push(newsletter, None, "accounts:office", "office")
    assert isinstance(group, Group)
    assert node.dispatch.push(receipt, None, "accounts:office", "office") is group
    assert group.account_pool == "office"
    assert [node.dispatch.next_relayed(group).job for _ in range(2)] == [receipt, newsletter]
    assert node.shaper.statistics() == []  # no bucket: a mailbox's reservation is the permission
    group.resume_at = START + timedelta(hours=1)  # no account was free
    node.dispatch.free(resume=True)  # an operator's command: ask again now
    assert group.resume_at is None
    assert group.freed.is_set()

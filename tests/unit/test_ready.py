"""The ready queue: priority first, then turns among tenants (weighted) and among a
tenant's campaigns (its mail of no campaign first), then age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mtad.deliver.ready import ReadyQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def drain(queue: ReadyQueue[str]) -> list[str]:
    out = []
    while queue:
        peeked = queue.peek()
        assert queue.pop() == peeked
        out.append(peeked)
    return out


def test_one_tenant_is_served_oldest_first() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    for i in (3, 1, 2):
        q.push("t", 0, T0 + timedelta(seconds=i), f"m{i}")
    assert drain(q) == ["m1", "m2", "m3"]


def test_a_big_campaign_does_not_starve_a_small_tenant() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    for i in range(1000):
        q.push("campaign", 0, T0 + timedelta(milliseconds=i), f"c{i}")
    for i in range(3):
        q.push("shop", 0, T0 + timedelta(seconds=10 + i), f"s{i}")  # younger than the whole campaign
    order = drain(q)
    assert [order.index(f"s{i}") for i in range(3)] == [1, 3, 5]  # turn about
    assert order[6:] == [f"c{i}" for i in range(3, 1000)]


def test_higher_priority_goes_first_whoever_sends_it() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    for i in range(5):
        q.push("campaign", 0, T0 + timedelta(seconds=i), f"c{i}")
    q.push("shop", 0, T0, "receipt")
    q.push("shop", 10, T0 + timedelta(seconds=9), "password-reset")
    q.push("campaign", -5, T0, "digest")
    assert drain(q) == ["password-reset", "c0", "receipt", "c1", "c2", "c3", "c4", "digest"]


def test_weights_give_more_turns() -> None:
    q: ReadyQueue[str] = ReadyQueue({"big": 3})
    for i in range(6):
        q.push("big", 0, T0 + timedelta(seconds=i), f"b{i}")
        q.push("small", 0, T0 + timedelta(seconds=i), f"s{i}")
    assert drain(q) == ["b0", "b1", "b2", "s0", "b3", "b4", "b5", "s1", "s2", "s3", "s4", "s5"]


def test_tenants_joining_and_leaving_keep_their_turns() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    q.push("a", 0, T0, "a0")
    q.push("b", 0, T0, "b0")
    q.push("c", 0, T0, "c0")
    q.push("c", 0, T0 + timedelta(1), "c1")
    assert q.pop() == "a0"  # a leaves
    q.push("d", 0, T0, "d0")
    assert drain(q) == ["b0", "c0", "d0", "c1"]


def test_a_tenants_campaigns_take_turns_after_its_mail_of_no_campaign() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    for i in range(100):
        q.push("shop", 0, T0 + timedelta(milliseconds=i), f"big{i}", "big")
    for i in range(2):
        q.push("shop", 0, T0 + timedelta(seconds=10 + i), f"small{i}", "small")
        q.push("shop", 0, T0 + timedelta(seconds=20 + i), f"receipt{i}")  # the youngest of all, and first
    assert drain(q)[:6] == ["receipt0", "receipt1", "big0", "small0", "big1", "small1"]


def test_a_tenant_with_many_campaigns_takes_no_more_turns_than_another() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    for i in range(4):
        for campaign in ("c1", "c2", "c3"):
            q.push("many", 0, T0 + timedelta(seconds=i), f"{campaign}-{i}", campaign)
        q.push("one", 0, T0 + timedelta(seconds=i), f"one-{i}", "only")
    assert drain(q)[:8] == ["c1-0", "one-0", "c2-0", "one-1", "c3-0", "one-2", "c1-1", "one-3"]


def test_priority_still_comes_first_across_campaigns() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    q.push("shop", 0, T0, "newsletter", "news")
    q.push("shop", 5, T0 + timedelta(seconds=1), "launch", "launch")
    q.push("shop", -5, T0, "digest")
    assert drain(q) == ["launch", "newsletter", "digest"]


def test_an_empty_queue_says_so() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    assert len(q) == 0
    with pytest.raises(IndexError):
        q.peek()

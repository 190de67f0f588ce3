"""The AIMD bucket and the shaper, on an injected clock."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mtad.deliver import shaping
from mtad.outbound import limits

LIMITS = limits.Limits(
    rate=10.0, min_rate=1.0, max_rate=40.0, burst=5, sessions=4, min_sessions=1,
    step=2.0, factor=0.5, increase_after=3,
)  # fmt: skip
WALL = datetime(2026, 11, 29, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return WALL + timedelta(seconds=self.t)


def shaper(clock: Clock) -> shaping.Shaper:
    return shaping.Shaper(clock, clock.wall)


def drain(s: shaping.Shaper, group: str = "g", lim: limits.Limits = LIMITS) -> tuple[int, shaping.Decision]:
    """Take (and end at once, without feedback) until refused; how many went, and the refusal."""
    went = 0
    while (decision := s.take(group, "", lim)).go:
        s.done(group, "")
        went += 1
    return went, decision


def test_a_full_bucket_allows_its_burst_then_paces_at_its_rate() -> None:
    clock = Clock()
    s = shaper(clock)
    went, refused = drain(s)
    assert went == 5  # the burst
    assert refused.retry_after == pytest.approx(0.1)  # one token at 10/s
    clock.t += 0.35
    assert drain(s)[0] == 3  # 3.5 tokens came back
    clock.t += 60
    assert drain(s)[0] == 5  # never more than the burst


def test_the_session_cap_holds_whatever_the_tokens() -> None:
    clock = Clock()
    s = shaper(clock)
    assert all(s.take("g", "", LIMITS).go for _ in range(4))
    refused = s.take("g", "", LIMITS)
    assert not refused.go
    assert refused.retry_after is None  # wait for a session to end, not for time
    s.done("g", "")
    assert s.take("g", "", LIMITS).go


def test_a_throttling_reply_halves_the_rate_drops_a_session_and_spends_the_burst() -> None:
    clock = Clock()
    s = shaper(clock)
    assert s.take("g", "", LIMITS).go
    s.done("g", "", throttled=True)
    [b] = s.statistics()
    assert (b.rate, b.sessions, b.decreases) == (5.0, 3, 1)
    assert b.tokens == 0
    assert s.take("g", "", LIMITS).retry_after == pytest.approx(0.2)  # one token at 5/s


def test_replies_of_sessions_already_in_flight_decrease_once() -> None:
    clock = Clock()
    s = shaper(clock)
    for _ in range(4):
        assert s.take("g", "", LIMITS).go
    for _ in range(4):
        s.done("g", "", throttled=True)  # all four were on the wire when the receiver said so
    [b] = s.statistics()
    assert (b.rate, b.sessions, b.decreases) == (5.0, 3, 1)
    clock.t += 0.5  # still within the hold (two tokens at 5/s = 0.4 s... and at least one second)
    s.take("g", "", LIMITS)
    s.done("g", "", throttled=True)
    assert s.statistics()[0].rate == 5.0
    clock.t += 1.0
    s.take("g", "", LIMITS)
    s.done("g", "", throttled=True)
    assert s.statistics()[0].rate == 2.5


def test_decreases_stop_at_the_floor() -> None:
    clock = Clock()
    s = shaper(clock)
    for _ in range(10):
        clock.t += 10
        s.take("g", "", LIMITS)
        s.done("g", "", throttled=True)
    [b] = s.statistics()
    assert (b.rate, b.sessions) == (LIMITS.min_rate, LIMITS.min_sessions)


def test_a_run_of_deliveries_raises_the_rate_by_a_step_up_to_the_ceiling() -> None:
    clock = Clock()
    s = shaper(clock)
    s.take("g", "", LIMITS)
    s.done("g", "", throttled=True)  # 5/s, 3 sessions
    s.take("g", "", LIMITS)
    s.done("g", "", delivered=2)
    assert s.statistics()[0].rate == 5.0  # 2 of 3 in a row
    s.take("g", "", LIMITS)
    s.done("g", "", delivered=1)
    [b] = s.statistics()
    assert (b.rate, b.sessions, b.increases) == (7.0, 4, 1)
    for _ in range(100):
        s.take("g", "", LIMITS)
        s.done("g", "", delivered=3)
    [b] = s.statistics()
    assert (b.rate, b.sessions) == (LIMITS.max_rate, LIMITS.sessions)


def test_a_throttle_breaks_the_run() -> None:
    clock = Clock()
    s = shaper(clock)
    s.take("g", "", LIMITS)
    s.done("g", "", delivered=2)
    clock.t += 5
    s.take("g", "", LIMITS)
    s.done("g", "", throttled=True)
    s.take("g", "", LIMITS)
    s.done("g", "", delivered=2)
    assert s.statistics()[0].increases == 0


def test_attempts_without_feedback_change_nothing() -> None:
    """Transport failures and mtad's own: the caller passes neither delivered nor throttled."""
    clock = Clock()
    s = shaper(clock)
    for _ in range(20):
        clock.t += 1
        s.take("g", "", LIMITS)
        s.done("g", "")
    [b] = s.statistics()
    assert (b.rate, b.sessions, b.decreases, b.increases) == (10.0, 4, 0, 0)


def test_each_node_takes_its_share() -> None:
    clock = Clock()
    s = shaper(clock)
    s.take("g", "", LIMITS)
    s.done("g", "")
    s.set_nodes(2)
    [b] = s.statistics()
    assert (b.local_rate, b.local_sessions) == (5.0, 2)
    assert b.tokens <= 2.5  # half the burst
    assert sum(s.take("g", "", LIMITS).go for _ in range(4)) == 2  # half the sessions
    s.set_nodes(10)
    assert s.statistics()[0].local_sessions == 1  # never none


def test_buckets_are_per_group_and_source() -> None:
    clock = Clock()
    s = shaper(clock)
    assert drain(s, "a")[0] == 5
    assert drain(s, "b")[0] == 5
    assert s.take("a", "192.0.2.1", LIMITS).go
    assert len(s.statistics()) == 3


def test_an_unlimited_bucket_only_caps_sessions_and_adapts_them() -> None:
    clock = Clock()
    s = shaper(clock)
    free = replace(LIMITS, rate=math.inf, max_rate=math.inf)
    assert all(s.take("g", "", free).go for _ in range(4))
    assert not s.take("g", "", free).go
    s.done("g", "", throttled=True)
    [b] = s.statistics()
    assert (b.rate, b.sessions) == (math.inf, 3)


def test_a_later_change_from_elsewhere_is_adopted_and_an_earlier_one_is_not() -> None:
    clock = Clock()
    s = shaper(clock)
    s.take("g", "", LIMITS)
    s.done("g", "", throttled=True)  # ours, at clock.wall()
    ours = s.statistics()[0].changed_at
    s._merge([{"route_group": "g", "source": "", "rate": 1.5, "sessions": 1, "changed_at": ours - timedelta(1)}])
    assert s.statistics()[0].rate == 5.0
    s._merge([{"route_group": "g", "source": "", "rate": 1.5, "sessions": 1, "changed_at": ours + timedelta(1)}])
    assert (s.statistics()[0].rate, s.statistics()[0].sessions) == (1.5, 1)


def test_a_restored_bucket_starts_where_the_checkpoint_was_within_todays_limits() -> None:
    clock = Clock()
    s = shaper(clock)
    s._merge([
        {"route_group": "g", "source": "", "rate": 99.0, "sessions": 9, "changed_at": WALL},
        {"route_group": "h", "source": "", "rate": 3.0, "sessions": 2, "changed_at": WALL},
        {"route_group": "i", "source": "", "rate": 3.0, "sessions": 2, "changed_at": None},
    ])  # fmt: skip
    for group in "ghi":
        s.take(group, "", LIMITS)
    rates = {b.group: (b.rate, b.sessions) for b in s.statistics()}
    assert rates == {"g": (40.0, 4), "h": (3.0, 2), "i": (10.0, 4)}  # g clamped; i never learned anything

"""Routing against a zone-text resolver and an injected clock."""

from __future__ import annotations

import math
import random

import pytest

from mtad.base import errors
from mtad.base.endpoints import HostPort
from mtad.deliver import settings as deliver_settings
from mtad.outbound import limits, routing
from tests.zones import ZoneResolver

ZONE = """
gmail-like.example.     300 MX 5 gmail-smtp-in.l.google.com.
gmail-like.example.     300 MX 10 alt1.gmail-smtp-in.l.google.com.
gmail-smtp-in.l.google.com.      300 A 127.0.0.10
alt1.gmail-smtp-in.l.google.com. 300 A 127.0.0.11
workspace.example.      300 MX 1 aspmx.l.google.com.
aspmx.l.google.com.     300 A 127.0.0.12
own.example.            120 MX 10 mx1.own.example.
own.example.            120 MX 10 mx2.own.example.
own.example.            120 MX 20 backup.own.example.
mx1.own.example.        60 A 127.0.0.21
mx2.own.example.        300 A 127.0.0.22
mx2.own.example.        300 AAAA ::1
backup.own.example.     300 A 127.0.0.23
implicit.example.       300 A 127.0.0.30
nullmx.example.         300 MX 0 .
nothing.example.        300 TXT "v=spf1 -all"
dangling.example.       300 MX 10 nowhere.dangling.example.
"""

PROVIDERS = routing.load_providers(deliver_settings.shipped_table("providers"))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def router(**kw: object) -> tuple[routing.Router, ZoneResolver, Clock]:
    resolver = ZoneResolver(ZONE, servfail={"broken.example"})
    clock = Clock()
    return routing.Router(resolver, PROVIDERS, port=2525, now=clock, **kw), resolver, clock  # type: ignore[arg-type]


async def test_mx_hosts_in_preference_order_grouped_by_provider() -> None:
    r, _, _ = router()
    route = await r.route("gmail-like.example")
    assert isinstance(route, routing.Route)
    assert route.group == "google"
    assert [(h.name, h.preference, h.addresses, h.port) for h in route.hops] == [
        ("gmail-smtp-in.l.google.com", 5, ("127.0.0.10",), 2525),
        ("alt1.gmail-smtp-in.l.google.com", 10, ("127.0.0.11",), 2525),
    ]
    workspace = await r.route("workspace.example")
    assert isinstance(workspace, routing.Route)
    assert workspace.group == "google"  # many Workspace domains share one group


async def test_unknown_provider_is_a_group_of_its_mx_hosts() -> None:
    r, _, _ = router()
    route = await r.route("own.example")
    assert isinstance(route, routing.Route)
    assert route.group == "mx:backup.own.example,mx1.own.example,mx2.own.example"
    assert route.limits == PROVIDERS.default
    assert {h.name: h.addresses for h in route.hops}["mx2.own.example"] == ("127.0.0.22", "::1")


def test_equal_preferences_are_shuffled_and_backups_come_last() -> None:
    hops = tuple(routing.Hop(n, p, ("127.0.0.1",), 25) for n, p in [("a", 10), ("b", 10), ("c", 20), ("d", 10)])
    route = routing.Route("x.example", "g", 1, hops)
    orders = {tuple(h.name for h in route.attempt_order(random.Random(seed))) for seed in range(40)}
    assert all(order[-1] == "c" for order in orders)
    assert len(orders) > 1


async def test_implicit_mx() -> None:
    r, _, _ = router()
    route = await r.route("implicit.example")
    assert isinstance(route, routing.Route)
    assert [(h.name, h.addresses) for h in route.hops] == [("implicit.example", ("127.0.0.30",))]


@pytest.mark.parametrize(
    ("domain", "why"),
    [
        ("nullmx.example", "null MX"),
        ("missing.example", "does not exist"),
        ("nothing.example", "no MX and no address"),
    ],
)
async def test_undeliverable_domains(domain: str, why: str) -> None:
    r, _, _ = router()
    verdict = await r.route(domain)
    assert isinstance(verdict, routing.Undeliverable)
    assert why in verdict.text


async def test_transient_failures_raise_and_are_not_cached() -> None:
    r, resolver, _ = router()
    with pytest.raises(errors.RouteTempFail):
        await r.route("broken.example")
    with pytest.raises(errors.RouteTempFail):
        await r.route("dangling.example")  # an MX whose host has no address
    resolver.servfail.clear()
    resolver.records[("broken.example", "A")].append(("127.0.0.40", 300))
    resolver.names.add("broken.example")
    assert isinstance(await r.route("broken.example"), routing.Route)


async def test_answers_are_cached_for_their_ttl() -> None:
    r, resolver, clock = router()
    await r.route("own.example")
    asked = len(resolver.queries)
    clock.now = 59  # mx1's A record has a TTL of 60: the shortest in the route
    await r.route("own.example")
    assert len(resolver.queries) == asked
    clock.now = 61
    await r.route("own.example")
    assert len(resolver.queries) > asked
    assert r.statistics().hits == 1

    negative = len(resolver.queries)
    await r.route("missing.example")
    await r.route("missing.example")  # negative answers are cached too
    assert len(resolver.queries) == negative + 1


async def test_the_cache_is_bounded() -> None:
    r, _, _ = router(cache_size=2)
    for domain in ("own.example", "implicit.example", "gmail-like.example"):
        await r.route(domain)
    assert r.statistics().cached == 2


async def test_static_routes_skip_dns() -> None:
    r, resolver, _ = router(routes={"Relay.Example": HostPort("127.0.0.50", 2526)})
    route = await r.route("relay.example")
    assert isinstance(route, routing.Route)
    assert route.relay
    assert [(h.addresses, h.port) for h in route.hops] == [(("127.0.0.50",), 2526)]
    assert resolver.queries == []


def test_providers_file_problems_are_all_reported() -> None:
    providers = {"x": {"mx_suffixes": []}, "y": {"mx_suffixes": ["a"], "z": 1, "rate": "fast"}}
    with pytest.raises(errors.ConfigError) as info:
        routing.parse_providers({"default": {"sessions": 0}, "providers": providers})
    problems = info.value.problems
    assert len(problems) == 4, problems
    assert any("[default] sessions: expected a whole number" in p for p in problems)
    assert any("[providers.x] mx_suffixes" in p for p in problems)
    assert any("[providers.y]: unknown keys z" in p for p in problems)
    assert any('[providers.y] rate: expected a rate such as "10/s"' in p for p in problems)


def test_provider_limits_inherit_the_default_and_parse_rates() -> None:
    providers = routing.parse_providers(
        {
            "default": {"rate": "120/min", "max_rate": "10/s", "sessions": 4},
            "providers": {
                "big": {"mx_suffixes": ["big.example"], "rate": "36000/h", "max_rate": "unlimited", "sessions": 30}
            },
        }
    )
    assert (providers.default.rate, providers.default.max_rate, providers.default.sessions) == (2.0, 10.0, 4)
    [big] = providers.known
    assert (big.limits.rate, big.limits.max_rate, big.limits.sessions) == (10.0, math.inf, 30)
    assert big.limits.factor == providers.default.factor  # not set: the default's
    assert providers.group_of(["mx.big.example"]) == ("big", big.limits)


def test_limits_that_contradict_each_other_are_refused() -> None:
    problems: list[str] = []
    limits.parse({"rate": "50/s", "max_rate": "10/s", "min_sessions": 9, "factor": 1.5}, limits.DEFAULT, "[x]",
                 problems)  # fmt: skip
    assert any("[x] rate: expected min_rate <= rate <= max_rate" in p for p in problems)
    assert any("[x] min_sessions: expected at most sessions (5), got 9" in p for p in problems)
    assert any("[x] factor: expected a number between 0 and 1" in p for p in problems)
    problems.clear()
    limits.parse({"rate": "unlimited"}, limits.DEFAULT, "[y]", problems)
    assert problems == ['[y] max_rate: an unlimited rate needs max_rate = "unlimited"']

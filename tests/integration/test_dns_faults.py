"""Delivery survives broken DNS: an MX host whose AAAA (or every) lookup fails,
against a real DNS server on loopback that refuses, fails or ignores those queries."""

from __future__ import annotations

import pytest

from mtad.base import errors
from mtad.base.endpoints import HostPort
from mtad.deliver import settings as deliver_settings
from mtad.outbound import routing
from tests.dnsserver import PickyServer

PROVIDERS = routing.load_providers(deliver_settings.shipped_table("providers"))


@pytest.mark.parametrize("failure", ["REFUSED", "SERVFAIL", "silent"])
async def test_a_host_whose_aaaa_lookup_fails_is_reached_over_its_a_record(failure: str) -> None:
    records = {
        ("broken.test", "MX"): ["10 mx1.broken.test.", "20 mx2.broken.test."],
        ("mx1.broken.test", "A"): ["127.0.0.2"],
        ("mx2.broken.test", "A"): ["127.0.0.3"],
    }
    failing = {("mx1.broken.test", "AAAA"): failure, ("mx2.broken.test", "AAAA"): failure}
    server = PickyServer(records, failing)
    try:
        resolver = routing.DnsResolver([HostPort("127.0.0.1", server.port)], timeout=0.5)
        route = await routing.Router(resolver, PROVIDERS, port=25).route("broken.test")
    finally:
        server.close()
    assert isinstance(route, routing.Route)
    assert [(hop.name, hop.addresses) for hop in route.hops] == [
        ("mx1.broken.test", ("127.0.0.2",)), ("mx2.broken.test", ("127.0.0.3",))
    ]  # fmt: skip


async def test_an_mx_host_whose_lookups_all_fail_leaves_the_others() -> None:
    records = {("two.test", "MX"): ["10 mx1.two.test.", "20 mx2.two.test."], ("mx2.two.test", "A"): ["127.0.0.3"]}
    failing = {("mx1.two.test", "A"): "SERVFAIL", ("mx1.two.test", "AAAA"): "REFUSED"}
    server = PickyServer(records, failing)
    try:
        resolver = routing.DnsResolver([HostPort("127.0.0.1", server.port)], timeout=0.5)
        route = await routing.Router(resolver, PROVIDERS, port=25).route("two.test")
        assert isinstance(route, routing.Route)
        assert [hop.name for hop in route.hops] == ["mx2.two.test"]
        # With no host left it is a temporary failure, as before.
        server.failing[("mx2.two.test", "A")] = "SERVFAIL"
        with pytest.raises(errors.RouteTempFail):
            await routing.Router(resolver, PROVIDERS, port=25).route("two.test")
    finally:
        server.close()


@pytest.mark.parametrize("validating", [True, False])
async def test_an_answer_is_secure_only_when_the_resolver_sets_the_ad_bit(validating: bool) -> None:
    records = {
        ("signed.test", "MX"): ["10 mx.signed.test."],
        ("mx.signed.test", "A"): ["127.0.0.2"],
        ("_25._tcp.mx.signed.test", "TLSA"): ["3 1 1 " + "ab" * 32],
    }
    server = PickyServer(records, validating=validating)
    try:
        resolver = routing.DnsResolver([HostPort("127.0.0.1", server.port)], timeout=0.5)
        route = await routing.Router(resolver, PROVIDERS, port=25).route("signed.test")
        tlsa = await resolver.lookup("_25._tcp.mx.signed.test", "TLSA")
    finally:
        server.close()
    assert isinstance(route, routing.Route)
    assert route.secure is validating
    assert (tlsa.values, tlsa.secure) == (("3 1 1 " + "ab" * 32,), validating)
    assert all(server.asked_ad)  # mtad asks for the AD bit (RFC 6840 5.7)

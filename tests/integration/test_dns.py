"""routing.DnsResolver (dnspython) against real DNS servers on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mtad.base import errors
from mtad.base.endpoints import HostPort
from mtad.deliver import settings as deliver_settings
from mtad.outbound import routing
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq, ServfailServer

pytestmark = NEEDS_DNSMASQ

PROVIDERS = routing.load_providers(deliver_settings.shipped_table("providers"))


@pytest.fixture(scope="module")
def dnsmasq() -> Iterator[Dnsmasq]:
    server = Dnsmasq(
        "test",
        [
            "--mx-host=pref.test,mx1.pref.test,10",
            "--mx-host=pref.test,mx2.pref.test,20",
            "--host-record=mx1.pref.test,127.0.0.2",
            "--host-record=mx2.pref.test,127.0.0.3,::1",
            "--host-record=implicit.test,127.0.0.4",
            "--dns-rr=nullmx.test,15,000000",  # MX 0 . (RFC 7505), as a raw record
            "--local=/google.com/",
            "--mx-host=gw.test,alt1.aspmx.l.google.com,5",
            "--host-record=alt1.aspmx.l.google.com,127.0.0.5",
        ],
    )
    yield server
    server.close()


def router(port: int) -> routing.Router:
    resolver = routing.DnsResolver([HostPort("127.0.0.1", port)], timeout=2.0)
    return routing.Router(resolver, PROVIDERS, port=25)


async def test_mx_in_preference_order_with_addresses(dnsmasq: Dnsmasq) -> None:
    route = await router(dnsmasq.port).route("pref.test")
    assert isinstance(route, routing.Route)
    assert [(h.name, h.preference, h.addresses) for h in route.hops] == [
        ("mx1.pref.test", 10, ("127.0.0.2",)),
        ("mx2.pref.test", 20, ("127.0.0.3", "::1")),
    ]
    assert route.group == "mx:mx1.pref.test,mx2.pref.test"


async def test_a_provider_is_recognised_by_its_mx_host(dnsmasq: Dnsmasq) -> None:
    route = await router(dnsmasq.port).route("gw.test")
    assert isinstance(route, routing.Route)
    assert route.group == "google"


async def test_implicit_mx(dnsmasq: Dnsmasq) -> None:
    route = await router(dnsmasq.port).route("implicit.test")
    assert isinstance(route, routing.Route)
    assert [(h.name, h.addresses) for h in route.hops] == [("implicit.test", ("127.0.0.4",))]


@pytest.mark.parametrize(("domain", "why"), [("nullmx.test", "null MX"), ("nowhere.test", "does not exist")])
async def test_undeliverable(dnsmasq: Dnsmasq, domain: str, why: str) -> None:
    verdict = await router(dnsmasq.port).route(domain)
    assert isinstance(verdict, routing.Undeliverable)
    assert why in verdict.text


async def test_servfail_is_transient() -> None:
    server = ServfailServer()
    try:
        with pytest.raises(errors.RouteTempFail, match="SERVFAIL"):
            await router(server.port).route("anything.test")
    finally:
        server.close()

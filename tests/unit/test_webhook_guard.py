"""The guard of HTTP requests (webhooks): which addresses a request may go to. An IPv6 address that
carries an IPv4 address (NAT64, 6to4, IPv4-mapped or -compatible, Teredo) is
judged by the IPv4 address it carries, as that address itself would be."""

from __future__ import annotations

import ipaddress

import pytest

from mtad.outbound import http_client

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.0.0.1", "169.254.169.254", "::1", "fe80::1", "fd00::1",
        "64:ff9b::7f00:1",  # NAT64 (RFC 6052) of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # of 169.254.169.254, the cloud metadata address
        "64:ff9b::a00:1",  # of 10.0.0.1
        "64:ff9b:1::7f00:1",  # the local-use NAT64 prefix (RFC 8215)
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "::ffff:127.0.0.1", "::ffff:10.0.0.1",  # IPv4-mapped
        "::ffff:0:7f00:1",  # IPv4-translated (RFC 2765)
        "::127.0.0.1", "::a9fe:a9fe",  # IPv4-compatible (deprecated)
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo of 127.0.0.1
        "2001:0:53aa:64c:0:0:f7ff:fffe",  # Teredo, its client 8.0.0.1
    ],
)  # fmt: skip
def test_an_address_inside_is_refused_in_any_form(address: str) -> None:
    assert not http_client.allows(ipaddress.ip_address(address), ())
    host = f"[{address}]" if ":" in address else address
    assert http_client.refusal(f"https://{host}/hook", http_client.Guard()) is not None


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8"],
)
def test_an_address_outside_is_allowed_in_any_form(address: str) -> None:
    assert http_client.allows(ipaddress.ip_address(address), ())


def test_an_allowed_network_allows_its_addresses_in_any_form() -> None:
    for address in ("127.0.0.1", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"):
        assert http_client.allows(ipaddress.ip_address(address), LOOPBACK), address
    assert not http_client.allows(ipaddress.ip_address("64:ff9b::a00:1"), LOOPBACK)

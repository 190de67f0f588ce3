"""Routing: where mail for a domain goes, grouped by the provider that receives it.

The only module that imports dnspython. A `Resolver` answers one DNS question
(`DnsResolver` with dnspython; tests use a zone-text resolver behind the same
protocol). The `Router` turns a domain into a `Route`: its mail exchangers in
preference order (RFC 5321 5.1: an implicit MX when there is none but an address
record) with their addresses, and the provider group they belong to; or into
`Undeliverable` (NXDOMAIN, a null MX per RFC 7505, no MX and no address). Routes
are cached for the TTL of their records, undeliverable answers for the
negative-caching TTL of the zone's SOA; a transient failure (SERVFAIL, timeout)
raises errors.RouteTempFail and is not cached.

Static routes (like Postfix's transport maps) send a domain to a fixed relay
without asking DNS for its MX.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import dns.asyncresolver
import dns.exception
import dns.flags
import dns.nameserver
import dns.rdatatype
import dns.resolver

from mtad.base import errors
from mtad.base.endpoints import HostPort
from mtad.outbound import limits
from mtad.outbound import providers as provider_table

# How long to remember an answer that came with no usable TTL, and the bounds on any.
DEFAULT_NEGATIVE_TTL = 300.0
MIN_TTL, MAX_TTL = 5.0, 86_400.0


@dataclass(frozen=True, slots=True)
class Records:
    """The answer to one question: rdata as text, and how long it may be cached.

    An empty answer (no such records) carries the negative-caching TTL;
    `nxdomain` says the name itself does not exist. `secure`: the resolver set
    the AD bit (it validated the answer with DNSSEC); only a validating resolver
    the operator trusts, on a path no one else can write to, makes that mean anything.
    """

    values: tuple[str, ...]
    ttl: float
    nxdomain: bool = False
    secure: bool = False


_TXT_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_TXT_ESCAPE = re.compile(r"\\(\d{3}|.)")


def txt_text(value: str) -> str:
    """A TXT record's text from its rdata as written (quoted strings, escaped, as
    dnspython and zone files write it): the strings joined; text not quoted as is."""
    if not value.startswith('"'):
        return value
    joined = "".join(_TXT_STRING.findall(value))
    return _TXT_ESCAPE.sub(lambda m: chr(int(m.group(1))) if m.group(1).isdigit() else m.group(1), joined)


class Resolver(Protocol):
    async def lookup(self, name: str, rdtype: str) -> Records:
        """Records of rdtype ("MX", "A", "AAAA", "TXT", "TLSA") at name; raises RouteTempFail."""
        ...


class DnsResolver:
    """dnspython's asynchronous stub resolver, at the configured name servers."""

    def __init__(self, nameservers: Sequence[HostPort] = (), *, timeout: float = 5.0) -> None:
        if nameservers:
            self._resolver = dns.asyncresolver.Resolver(configure=False)
            self._resolver.nameservers = [dns.nameserver.Do53Nameserver(ns.host, ns.port) for ns in nameservers]
        else:
            self._resolver = dns.asyncresolver.Resolver()  # the system's /etc/resolv.conf
        self._resolver.lifetime = timeout
        self._resolver.cache = None  # the Router caches routes
        # Ask for the AD bit (RFC 6840 5.7), and say we understand DNSSEC (the DO bit):
        # some validating resolvers set AD only then.
        self._resolver.flags = dns.flags.RD | dns.flags.AD
        self._resolver.use_edns(0, dns.flags.DO, 1232)

    async def lookup(self, name: str, rdtype: str) -> Records:
        try:
            answer = await self._resolver.resolve(name, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN as exc:
            return Records((), _negative_ttl(exc), nxdomain=True, secure=_secure(exc))
        except (dns.resolver.NoNameservers, dns.exception.Timeout) as exc:
            raise errors.RouteTempFail(f"{rdtype} {name}: {exc}") from exc
        except dns.exception.DNSException as exc:
            raise errors.RouteTempFail(f"{rdtype} {name}: {type(exc).__name__}: {exc}") from exc
        ttl = max(0.0, answer.expiration - time.time())
        secure = bool(answer.response.flags & dns.flags.AD)
        if answer.rrset is None:
            return Records((), ttl, secure=secure)
        return Records(tuple(rdata.to_text() for rdata in answer.rrset), ttl, secure=secure)


def _secure(exc: dns.resolver.NXDOMAIN) -> bool:
    responses = exc.responses().values()  # type: ignore[no-untyped-call]
    return bool(responses) and all(r.flags & dns.flags.AD for r in responses)


def _negative_ttl(exc: dns.resolver.NXDOMAIN) -> float:
    for response in exc.responses().values():  # type: ignore[no-untyped-call]
        try:
            return float(response.resolve_chaining().minimum_ttl)
        except dns.exception.DNSException:
            continue
    return DEFAULT_NEGATIVE_TTL


# --- providers ----------------------------------------------------------------------


# Kept in outbound.providers: the configuration reads the table without loading dnspython.
Provider = provider_table.Provider
Providers = provider_table.Providers
load_providers = provider_table.load_providers
parse_providers = provider_table.parse_providers


# --- routes --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hop:
    """One mail exchanger: its name, preference and addresses, and the port to use."""

    name: str
    preference: int
    addresses: tuple[str, ...]
    port: int
    secure: bool = False  # its address records were DNSSEC-validated: a signed zone, where DANE may apply


@dataclass(frozen=True, slots=True)
class Route:
    domain: str
    group: str  # the provider group: "google", "microsoft", ... or "mx:host1,host2"
    limits: limits.Limits  # the provider's shaping limits
    hops: tuple[Hop, ...]  # in preference order; equal preferences in random order per call
    relay: bool = False  # a static route, not DNS
    secure: bool = False  # the MX answer was DNSSEC-validated (the AD bit): the domain names its MX hosts

    def attempt_order(self, rng: random.Random | None = None) -> list[Hop]:
        """The hops in preference order, shuffled among equal preferences (RFC 5321 5.1)."""
        rng = rng or random.Random()
        ordered: list[Hop] = []
        for preference in sorted({h.preference for h in self.hops}):
            same = [h for h in self.hops if h.preference == preference]
            rng.shuffle(same)
            ordered.extend(same)
        return ordered


@dataclass(frozen=True, slots=True)
class Undeliverable:
    """No mail can be delivered to this domain; `text` says why, for a bounce or a 550."""

    domain: str
    text: str


@dataclass(slots=True)
class _Cached:
    value: Route | Undeliverable
    expires: float


@dataclass(slots=True)
class RouterStats:
    lookups: int = 0
    hits: int = 0
    tempfails: int = 0
    cached: int = 0


class Router:
    """Domain -> Route or Undeliverable, cached by TTL in a bounded LRU."""

    def __init__(
        self,
        resolver: Resolver,
        providers: Providers,
        *,
        routes: Mapping[str, HostPort] | None = None,
        port: int = 25,
        cache_size: int = 10_000,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolver = resolver
        self._providers = providers
        self._routes = {d.lower().rstrip("."): hp for d, hp in (routes or {}).items()}
        self._port = port
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_size = cache_size
        self._now = now
        self._stats = RouterStats()

    def reconfigure(self, providers: Providers, routes: Mapping[str, HostPort], port: int) -> None:
        """New provider and route tables (a reload): the cached routes are forgotten."""
        self._providers = providers
        self._routes = {d.lower().rstrip("."): hp for d, hp in routes.items()}
        self._port = port
        self._cache.clear()

    def statistics(self) -> RouterStats:
        self._stats.cached = len(self._cache)
        return self._stats

    async def route(self, domain: str) -> Route | Undeliverable:
        """Where mail for `domain` (a lower-case A-label) goes; raises RouteTempFail."""
        self._stats.lookups += 1
        cached = self._cache.get(domain)
        if cached is not None and cached.expires > self._now():
            self._cache.move_to_end(domain)
            self._stats.hits += 1
            return cached.value
        try:
            value, ttl = await self._resolve(domain)
        except errors.RouteTempFail:
            self._stats.tempfails += 1
            raise
        self._cache[domain] = _Cached(value, self._now() + min(max(ttl, MIN_TTL), MAX_TTL))
        self._cache.move_to_end(domain)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return value

    async def _resolve(self, domain: str) -> tuple[Route | Undeliverable, float]:
        relay = self._routes.get(domain)
        if relay is not None:
            addresses, ttl, _ = await self._addresses(relay.host)
            if not addresses:
                raise errors.RouteTempFail(f"the relay {relay} for {domain} has no address")
            hop = Hop(relay.host, 0, addresses, relay.port)
            return Route(domain, f"relay:{relay}", self._providers.default, (hop,), relay=True), ttl
        mx = await self._resolver.lookup(domain, "MX")
        if mx.nxdomain:
            return Undeliverable(domain, f"the domain {domain} does not exist (NXDOMAIN)"), mx.ttl
        exchangers = sorted(_parse_mx(mx.values), key=lambda pair: pair[0])
        if any(host == "" for _, host in exchangers):
            # RFC 7505: "MX 0 ." says the domain accepts no mail.
            return Undeliverable(domain, f"the domain {domain} accepts no mail (null MX, RFC 7505)"), mx.ttl
        ttl = mx.ttl
        if not exchangers:
            exchangers = [(0, domain)]  # RFC 5321 5.1: the domain is its own implicit MX
        hops = []
        failed: errors.RouteTempFail | None = None  # a host none of whose lookups answered
        for preference, host in exchangers:
            try:
                addresses, host_ttl, secure = await self._addresses(host)
            except errors.RouteTempFail as exc:
                failed, ttl = exc, MIN_TTL  # the hosts that answered, and a look again soon
                continue
            ttl = min(ttl, host_ttl)
            if addresses:
                hops.append(Hop(host, preference, addresses, self._port, secure))
        if not hops:
            if failed is not None:
                raise failed
            if not mx.values:
                return Undeliverable(domain, f"the domain {domain} has no MX and no address record"), ttl
            raise errors.RouteTempFail(f"no MX host of {domain} has an address")
        group, group_limits = self._providers.group_of(h.name for h in hops)
        return Route(domain, group, group_limits, tuple(hops), secure=mx.secure), ttl

    async def _addresses(self, host: str) -> tuple[tuple[str, ...], float, bool]:
        """IPv4 then IPv6 addresses of host (an IP literal is its own address), their
        TTL, and whether both answers were DNSSEC-validated. A lookup that fails
        (SERVFAIL, REFUSED, a timeout: broken servers still do it to AAAA) leaves the
        other's addresses, kept for a short while; RouteTempFail only when neither
        answered."""
        try:
            return (str(ipaddress.ip_address(host)),), MAX_TTL, False
        except ValueError:
            pass
        answers = await asyncio.gather(
            self._resolver.lookup(host, "A"), self._resolver.lookup(host, "AAAA"), return_exceptions=True
        )
        found = [a for a in answers if isinstance(a, Records)]
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, errors.RouteTempFail):
                raise answer
        if not found:
            assert isinstance(answers[0], errors.RouteTempFail)
            raise answers[0]
        ttl = min(a.ttl for a in found) if len(found) == len(answers) else MIN_TTL
        secure = len(found) == len(answers) and all(a.secure for a in found)
        return tuple(v for a in found for v in a.values), ttl, secure


def _parse_mx(values: Iterable[str]) -> list[tuple[int, str]]:
    """(preference, host without the trailing dot) from MX rdata text."""
    parsed = []
    for value in values:
        preference, _, host = value.partition(" ")
        parsed.append((int(preference), host.strip().rstrip(".").lower()))
    return parsed

"""HTTP requests: the one owner of aiohttp's client side. A `Client` is one aiohttp
session (a pool of connections); its lookups go through mtad's resolver ([dns]
nameservers, as delivery's) or, given none, the system's, and with a `Guard` keep
only the addresses a request may go to. What fails is translated here, once, into
errors.HttpError: CertificateInvalid for a certificate, `Refused` for the guard.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from mtad.base import errors
from mtad.outbound import routing

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(errors.HttpError):
    """The host of a request is not an address its `Guard` lets it go to."""


@dataclass(frozen=True, slots=True)
class Guard:
    """Where requests may go: global addresses, and those in `allowed` (`allows`).
    `why` ends the text of a refusal: what may not go there, and what allows it."""

    allowed: tuple[Network, ...] = ()
    why: str = "not an address a request may go to"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes  # at most the octets asked for


# IPv6 prefixes whose last 32 bits are an IPv4 address, the same host by another name.
_CARRYING = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, the well-known prefix (RFC 6052)
    ipaddress.ip_network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.ip_network("::ffff:0:0:0/96"),  # IPv4-translated (RFC 2765)
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated; :: and ::1 are in it too)
)
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215): inside by definition


def allows(address: Address, allowed: Sequence[Network]) -> bool:
    """Whether a request may go to the address: a global one, or one of `allowed`. An
    IPv6 address that carries an IPv4 one is judged as that IPv4 address would be:
    NAT64, IPv4-mapped, -translated or -compatible by it alone; a tunnel (6to4,
    Teredo) only when it is global itself and every IPv4 address it carries is
    allowed. Sync, no I/O."""
    if any(address in network for network in allowed):
        return True
    if isinstance(address, ipaddress.IPv6Address):
        if address in _NAT64_LOCAL:
            return False
        if any(address in prefix for prefix in _CARRYING):
            return allows(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), allowed)
        tunnelled = [address.sixtofour] if address.sixtofour else list(address.teredo or ())
        if tunnelled and not all(allows(carried, allowed) for carried in tunnelled):
            return False
    return address.is_global and not address.is_multicast


@functools.lru_cache(maxsize=4096)
def refusal(url: str, guard: Guard) -> str | None:
    """Why a request may not go to a URL that names an address (aiohttp looks up no
    address, so the guard's resolver never sees it), else None. Kept per URL: asked
    per request."""
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: the resolver checks what it resolves to
    if allows(address, guard.allowed):
        return None
    return f"{host}: {guard.why}"


class _Resolver(AbstractResolver):
    """aiohttp's lookups: through mtad's resolver, else the system's; with a guard,
    only the addresses it allows (Refused when none is)."""

    def __init__(self, resolver: routing.Resolver | None, guard: Guard | None) -> None:
        self._resolver = resolver
        self._system = DefaultResolver() if resolver is None else None
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._system is not None:
            found = await self._system.resolve(host, port, family)
        else:
            found = await self._look_up(host, port, family)
        if self._guard is None:
            return found
        kept = [r for r in found if allows(ipaddress.ip_address(r["host"]), self._guard.allowed)]
        if not kept:
            raise Refused(f"{host} resolves to {', '.join(sorted({r['host'] for r in found}))}: {self._guard.why}")
        return kept

    async def _look_up(self, host: str, port: int, family: socket.AddressFamily) -> list[ResolveResult]:
        """A and AAAA through mtad's resolver; OSError (aiohttp's word for a failed lookup) when none."""
        assert self._resolver is not None
        found: list[ResolveResult] = []
        for rdtype, af in (("A", socket.AF_INET), ("AAAA", socket.AF_INET6)):
            if family not in (socket.AF_UNSPEC, af):
                continue
            try:
                answer = await self._resolver.lookup(host, rdtype)
            except errors.RouteTempFail as exc:
                raise OSError(str(exc)) from exc
            found += [ResolveResult(hostname=host, host=v, port=port, family=af, proto=0, flags=0)
                      for v in answer.values]  # fmt: skip
        if not found:
            raise OSError(f"{host} has no address")
        return found

    async def close(self) -> None:
        if self._system is not None:
            await self._system.close()


class Client:
    """Requests through one pool of connections (at most `limit` at once), each
    within `timeout` seconds, verified against `tls` (None: the system's trust
    store). Opened by `async with` or at its first request; close() closes it."""

    def __init__(
        self,
        *,
        resolver: routing.Resolver | None = None,  # None: the system's lookups
        guard: Guard | None = None,
        tls: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        limit: int = 100,
    ) -> None:
        self._resolver, self._guard, self._tls = resolver, guard, tls
        self._timeout, self._limit = timeout, limit
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        self._opened()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None:
            resolver = _Resolver(self._resolver, self._guard)
            tls = self._tls if self._tls is not None else True
            connector = aiohttp.TCPConnector(resolver=resolver, ssl=tls, limit=self._limit)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
        return self._session

    async def request(
        self, method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None,
        read: int = 0,
    ) -> Answer:  # fmt: skip
        """The answer to one request (a redirect is an answer, not followed), with up
        to `read` octets of its body. HttpError when there was none: CertificateInvalid
        when the server's certificate is not valid for it, Refused by the guard."""
        try:
            async with self._opened().request(method, url, data=body, headers=headers,
                                              allow_redirects=False) as answer:  # fmt: skip
                content = await answer.content.read(read) if read > 0 else b""
                return Answer(answer.status, answer.content_type, content)
        except aiohttp.ClientSSLError as exc:
            raise errors.CertificateInvalid(str(exc), type(exc).__name__) from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise errors.HttpError(str(exc), type(exc).__name__) from exc

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

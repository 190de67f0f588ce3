"""HTTPS for MTA-STS and TLS reporting: aiohttp through mtad's own resolver
([dns] nameservers, as delivery's lookups), verified against the system's trust
store or only [tls] ca_file's CAs. `Fetcher` fetches a domain's MTA-STS policy
file (RFC 8461 3.3: no redirects, text/plain, at most 64 KiB, within a timeout).
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from mtad.base import errors
from mtad.outbound import mtasts, routing


class FetchError(Exception):
    """A policy that could not be fetched or read; the text says why, `result` in the
    words of TLS reporting."""

    def __init__(self, text: str, result: str = "sts-policy-fetch-error") -> None:
        super().__init__(text)
        self.result = result  # or "sts-webpki-invalid", "sts-policy-invalid"


class Resolving(AbstractResolver):
    """aiohttp's lookups through mtad's resolver ([dns] nameservers), as delivery's."""

    def __init__(self, resolver: routing.Resolver) -> None:
        self._resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
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
        pass


def trust(ca_file: Path | None) -> ssl.SSLContext:
    """A verifying client context: the system's trust store, or only the CAs of ca_file."""
    if ca_file is None:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=str(ca_file))


class Fetcher:
    """Fetches policy files over HTTPS (one aiohttp session, closed by close())."""

    def __init__(
        self, resolver: routing.Resolver, *, port: int = 443, timeout: float = 10.0, ca_file: Path | None = None
    ) -> None:
        self._resolver = resolver
        self._port, self._timeout, self._ca_file = port, timeout, ca_file
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(resolver=Resolving(self._resolver), ssl=trust(self._ca_file))
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def fetch(self, domain: str) -> mtasts.Policy:
        """The policy file of `domain`, parsed; raises FetchError."""
        host = f"mta-sts.{domain}"
        port = "" if self._port == 443 else f":{self._port}"
        url = f"https://{host}{port}/.well-known/mta-sts.txt"
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        try:
            async with self._client().get(url, allow_redirects=False, timeout=timeout) as response:
                if response.status != 200:
                    raise FetchError(f"{url} answered HTTP {response.status}")
                if response.content_type != "text/plain":
                    raise FetchError(f"{url} is {response.content_type}, not text/plain")
                text = await response.content.read(mtasts.MAX_POLICY_OCTETS + 1)
        except aiohttp.ClientSSLError as exc:
            raise FetchError(f"{url}: the certificate is not valid for {host}: {exc}", "sts-webpki-invalid") from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from exc
        try:
            return mtasts.parse(text)
        except mtasts.PolicyError as exc:
            raise FetchError(f"{url}: {exc}", "sts-policy-invalid") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

"""MTA-STS policy files fetched over HTTPS (outbound.http_client, through mtad's
resolver), verified against the system's trust store or only [tls] ca_file's CAs:
`Fetcher` fetches a domain's (RFC 8461 3.3: no redirects, text/plain, at most 64
KiB, within a timeout).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from mtad.base import errors
from mtad.outbound import http_client, mtasts, routing


class FetchError(errors.RemoteError):
    """A policy that could not be fetched or read; the text says why, `result` in the
    words of TLS reporting."""

    def __init__(self, text: str, result: str = "sts-policy-fetch-error") -> None:
        super().__init__(text)
        self.result = result  # or "sts-webpki-invalid", "sts-policy-invalid"


def trust(ca_file: Path | None) -> ssl.SSLContext:
    """A verifying client context: the system's trust store, or only the CAs of ca_file."""
    if ca_file is None:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=str(ca_file))


class Fetcher:
    """Fetches policy files over HTTPS (one HTTP client, closed by close())."""

    def __init__(
        self, resolver: routing.Resolver, *, port: int = 443, timeout: float = 10.0, ca_file: Path | None = None
    ) -> None:
        self._resolver = resolver
        self._port, self._timeout, self._ca_file = port, timeout, ca_file
        self._client: http_client.Client | None = None

    def _opened(self) -> http_client.Client:
        if self._client is None:
            self._client = http_client.Client(resolver=self._resolver, tls=trust(self._ca_file), timeout=self._timeout)
        return self._client

    async def fetch(self, domain: str) -> mtasts.Policy:
        """The policy file of `domain`, parsed; raises FetchError."""
        host = f"mta-sts.{domain}"
        port = "" if self._port == 443 else f":{self._port}"
        url = f"https://{host}{port}/.well-known/mta-sts.txt"
        try:
            answer = await self._opened().request("GET", url, read=mtasts.MAX_POLICY_OCTETS + 1)
        except errors.CertificateInvalid as exc:
            raise FetchError(
                f"{url}: the certificate is not valid for {host}: {exc.said}", "sts-webpki-invalid"
            ) from exc
        except errors.HttpError as exc:
            raise FetchError(f"{url}: {exc}") from exc
        if answer.status != 200:
            raise FetchError(f"{url} answered HTTP {answer.status}")
        if answer.content_type != "text/plain":
            raise FetchError(f"{url} is {answer.content_type}, not text/plain")
        try:
            return mtasts.parse(answer.body)
        except mtasts.PolicyError as exc:
            raise FetchError(f"{url}: {exc}", "sts-policy-invalid") from exc

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

"""OAuth 2.0 access tokens for XOAUTH2 (Google Workspace, Microsoft 365).

A sending account that logs in with XOAUTH2 keeps a refresh token; `Tokens`
exchanges it at the provider's token endpoint (RFC 6749 section 6: a POST of
grant_type=refresh_token) for an access token, keeps that in memory, and
exchanges again `margin` seconds before it expires. Callers at once share one
exchange. The endpoint is configurable (tests point it at a server on loopback):
https, or plain http to a loopback address only, so a token never crosses a
network in clear.

Answers: an access token (a vault.Secret); TokenRefused when the endpoint says
the grant or the client is no good (HTTP 400/401 with invalid_grant,
invalid_client, unauthorized_client...: the account must be disconnected until
an operator fixes it); TokenError for everything that may pass (unreachable, a
5xx, a reply that is not the JSON it should be). Neither error carries a secret.

The only module that speaks HTTP; a request is one short connection (tokens live
for about an hour, so one exchange an hour per account).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from mtad.base import errors
from mtad.base.vault import Secret

GOOGLE = "https://oauth2.googleapis.com/token"
MICROSOFT = "https://login.microsoftonline.com/common/oauth2/v2.0/token"
_REFUSALS = ("invalid_grant", "invalid_client", "unauthorized_client", "invalid_scope", "unsupported_grant_type")
_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Client:
    """The OAuth client an account's refresh token was issued to."""

    token_url: str  # GOOGLE, MICROSOFT (with the tenant), or a test server's
    client_id: str
    client_secret: Secret | None = field(default=None, repr=False)
    scope: str | None = None  # Microsoft: "https://outlook.office.com/SMTP.Send offline_access"


class Tokens:
    """The access tokens of one account: cached, refreshed `margin` seconds early."""

    def __init__(
        self,
        client: Client,
        refresh_token: Secret,
        *,
        margin: float = 300.0,
        now: Callable[[], float] = time.monotonic,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._client = client
        self._refresh_token = refresh_token
        self._margin = margin
        self._now = now
        self._tls = tls or ssl.create_default_context()
        self._token: Secret | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()
        self.exchanges = 0  # how many times the endpoint was asked (for tests and metrics)
        _check_url(client.token_url)

    async def access_token(self) -> Secret:
        """A token good for at least `margin` more seconds (an exchange when needed)."""
        async with self._lock:  # callers at once share one exchange
            if self._token is None or self._now() >= self._expires - self._margin:
                self._token, lifetime = await self._exchange()
                self._expires = self._now() + lifetime
            return self._token

    def forget(self) -> None:
        """Drop the cached token (the smarthost refused it: the next call exchanges)."""
        self._token = None

    async def _exchange(self) -> tuple[Secret, float]:
        self.exchanges += 1
        form = {
            "grant_type": "refresh_token",
            "refresh_token": self._refresh_token.reveal(),
            "client_id": self._client.client_id,
        }
        if self._client.client_secret is not None:
            form["client_secret"] = self._client.client_secret.reveal()
        if self._client.scope:
            form["scope"] = self._client.scope
        status, body = await _post(self._client.token_url, urllib.parse.urlencode(form).encode(), self._tls)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise errors.TokenError(f"token endpoint: HTTP {status} with a body that is not a JSON object")
        if status in (400, 401) and answer.get("error") in _REFUSALS:
            described = str(answer.get("error_description", ""))[:200]
            raise errors.TokenRefused(f"token endpoint refused: {answer['error']} {described}".rstrip())
        token, lifetime = answer.get("access_token"), answer.get("expires_in", 3600)
        if status != 200 or not isinstance(token, str) or not token or not isinstance(lifetime, int | float):
            raise errors.TokenError(f"token endpoint: HTTP {status}, error {answer.get('error')!r}")
        return Secret(token), float(lifetime)


def _check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and _loopback(parts.hostname):
        return
    raise errors.ConfigError([f"token endpoint {url!r}: expected https:// (or http:// to a loopback address)"])


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _post(url: str, body: bytes, tls: ssl.SSLContext) -> tuple[int, bytes]:
    """One HTTP/1.1 POST of a form, on a connection of its own; (status, body)."""
    parts = urllib.parse.urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: mtad\r\nAccept: application/json\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    try:
        async with asyncio.timeout(_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port, ssl=tls if secure else None)
            try:
                writer.write(request)
                await writer.drain()
                raw = await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        raise errors.TokenError(f"token endpoint {parts.netloc}: {type(exc).__name__}: {exc}") from None
    return _parse(raw)


def _parse(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise errors.TokenError("token endpoint: not an HTTP response") from None
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    elif b"content-length" in headers:
        body = body[: int(headers[b"content-length"])]
    return status, body


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            raise errors.TokenError("token endpoint: a broken chunked body") from None
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)

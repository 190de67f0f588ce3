"""XOAUTH2 access tokens from a token endpoint on loopback: exchanged, cached,
refreshed before expiry, shared by callers at once; refusals and failures told apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mtad.base import errors
from mtad.base.vault import Secret
from mtad.mailboxes import oauth
from tests.integration.tokens import TokenServer


@pytest.fixture
async def endpoint() -> AsyncIterator[TokenServer]:
    server = await TokenServer().start()
    yield server
    await server.stop()


def tokens(endpoint: TokenServer, refresh: str = "good", clock: list[float] | None = None) -> oauth.Tokens:
    client = oauth.Client(endpoint.url, "mtad-client", Secret("client-secret"), scope="https://mail.google.com/")
    now = (lambda: clock[0]) if clock is not None else (lambda: 0.0)
    return oauth.Tokens(client, Secret(refresh), margin=300, now=now)


async def test_a_token_is_exchanged_once_and_cached_until_shortly_before_it_expires(endpoint: TokenServer) -> None:
    clock = [1000.0]
    source = tokens(endpoint, clock=clock)
    assert (await source.access_token()).reveal() == "access-1"
    assert endpoint.requests[0] == {"grant_type": "refresh_token", "refresh_token": "good", "client_id": "mtad-client",
                                    "client_secret": "client-secret", "scope": "https://mail.google.com/"}  # fmt: skip
    clock[0] += 3600 - 301
    assert (await source.access_token()).reveal() == "access-1"  # still good for more than the margin
    clock[0] += 2
    assert (await source.access_token()).reveal() == "access-2"  # refreshed before it expires
    assert source.exchanges == 2


async def test_callers_at_once_share_one_exchange(endpoint: TokenServer) -> None:
    source = tokens(endpoint)
    got = await asyncio.gather(*(source.access_token() for _ in range(20)))
    assert {t.reveal() for t in got} == {"access-1"}
    assert len(endpoint.requests) == 1


async def test_a_forgotten_token_is_exchanged_again(endpoint: TokenServer) -> None:
    source = tokens(endpoint)
    await source.access_token()
    source.forget()  # the smarthost refused it
    assert (await source.access_token()).reveal() == "access-2"


async def test_a_chunked_answer_is_read(endpoint: TokenServer) -> None:
    endpoint.chunked = True
    assert (await tokens(endpoint).access_token()).reveal() == "access-1"


async def test_a_revoked_grant_is_a_refusal_and_carries_no_secret(endpoint: TokenServer) -> None:
    with pytest.raises(errors.TokenRefused, match="invalid_grant Token has been expired or revoked") as info:
        await tokens(endpoint, refresh="revoked-refresh").access_token()
    assert "revoked-refresh" not in str(info.value)
    assert "client-secret" not in str(info.value)


async def test_server_errors_and_silence_are_not_refusals(endpoint: TokenServer) -> None:
    endpoint.status = 500
    with pytest.raises(errors.TokenError) as info:
        await tokens(endpoint).access_token()
    assert not isinstance(info.value, errors.TokenRefused)
    await endpoint.stop()
    with pytest.raises(errors.TokenError, match=r"token endpoint 127\.0\.0\.1"):
        await tokens(endpoint).access_token()  # nobody listens any more
    await endpoint.start()


def test_a_token_endpoint_in_clear_must_be_on_loopback() -> None:
    with pytest.raises(errors.ConfigError, match="expected https://"):
        oauth.Tokens(oauth.Client("http://oauth.example.com/token", "c"), Secret("r"))
    oauth.Tokens(oauth.Client(oauth.GOOGLE, "c"), Secret("r"))  # https: fine
    assert "client-secret" not in repr(oauth.Client(oauth.GOOGLE, "c", Secret("client-secret")))

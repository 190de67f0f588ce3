"""Relay through a sending mailbox: verified TLS to the smarthost, AUTH, sessions
pooled per account (the sink in smarthost mode, on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mtad.outbound import outcomes, sessions
from mtad.outbound.outcomes import Failure
from mtad.submission import tls_context
from tests.integration.delivering import RULES
from tests.integration.mailboxes import trusting
from tests.sink import Sink

ALICE, BOB = "alice@example.com", "bob@example.com"
LOGINS = {ALICE: "alice-secret", BOB: "bob-token"}
TX = sessions.Transaction("app@example.org", ("r1@example.net", "r2@example.net"), b"Subject: t\r\n\r\nhi\r\n")


@pytest.fixture
async def smarthost(tls_files: tuple[Path, Path]) -> AsyncIterator[Sink]:
    started = await Sink(("127.0.0.4",), tls=tls_context(*tls_files), logins=LOGINS).start()
    yield started
    await started.stop()


def at(sink: Sink) -> list[sessions.Target]:
    return [sessions.Target("localhost", sink.addresses[0], sink.port)]  # the certificate's name


def login(user: str, mechanism: str, secret: str | None = None, **kw: bool) -> sessions.Login:
    return sessions.Login(user.split("@")[0], user, mechanism, LOGINS[user] if secret is None else secret, **kw)


@pytest.mark.parametrize("mechanism", ["plain", "login", "xoauth2"])
async def test_each_mechanism_logs_in_over_verified_starttls(
    smarthost: Sink, tls_files: tuple[Path, Path], mechanism: str
) -> None:
    pool = sessions.Pool(sessions.Settings(), relay_tls=trusting(tls_files[0]))
    result = await pool.deliver(at(smarthost), TX, login=login(ALICE, mechanism))
    await pool.close()
    assert {r: reply.code for r, reply in result.replies.items()} == {"r1@example.net": 250, "r2@example.net": 250}
    assert result.tls is not None
    [received] = smarthost.received
    assert (received.login, received.tls, received.recipients) == (ALICE, True, list(TX.recipients))


async def test_implicit_tls_on_465(tls_files: tuple[Path, Path]) -> None:
    smtps = await Sink(("127.0.0.4",), tls=tls_context(*tls_files), logins=LOGINS, implicit_tls=True).start()
    try:
        pool = sessions.Pool(sessions.Settings(), relay_tls=trusting(tls_files[0]))
        result = await pool.deliver(at(smtps), TX, login=login(BOB, "plain", implicit_tls=True))
        await pool.close()
    finally:
        await smtps.stop()
    assert result.failure is None
    assert result.tls is not None
    assert [m.login for m in smtps.received] == [BOB]


@pytest.mark.parametrize("mechanism", ["plain", "login", "xoauth2"])
async def test_a_refused_login_is_every_recipients_reply_and_classes_as_account_auth(
    smarthost: Sink, tls_files: tuple[Path, Path], mechanism: str
) -> None:
    pool = sessions.Pool(sessions.Settings(), relay_tls=trusting(tls_files[0]))
    result = await pool.deliver(at(smarthost), TX, login=login(ALICE, mechanism, secret="wrong"))
    await pool.close()
    assert {reply.line() for reply in result.replies.values()} == {"535 5.7.8 Username and Password not accepted"}
    assert RULES.classify(result.replies["r1@example.net"]).cls is outcomes.Class.ACCOUNT_AUTH
    assert smarthost.received == []


async def test_an_unverified_smarthost_gets_no_login(smarthost: Sink) -> None:
    pool = sessions.Pool(sessions.Settings())  # the system's trust store: the test's certificate is not in it
    result = await pool.deliver(at(smarthost), TX, login=login(ALICE, "plain"))
    await pool.close()
    assert (result.failure, result.replies) == (Failure.TLS_FAILED, {})
    assert smarthost.received == []


async def test_a_smarthost_without_starttls_gets_no_login() -> None:
    clear = await Sink(("127.0.0.4",), logins=LOGINS).start()
    try:
        pool = sessions.Pool(sessions.Settings())
        result = await pool.deliver(at(clear), TX, login=login(ALICE, "plain"))
        await pool.close()
    finally:
        await clear.stop()
    assert (result.failure, clear.received) == (Failure.TLS_REQUIRED, [])


async def test_sessions_are_reused_per_account_and_never_shared(smarthost: Sink, tls_files: tuple[Path, Path]) -> None:
    pool = sessions.Pool(sessions.Settings(), relay_tls=trusting(tls_files[0]))
    for user in (ALICE, BOB, ALICE, BOB):
        result = await pool.deliver(at(smarthost), TX, login=login(user, "plain"))
        assert result.failure is None
    stats = pool.statistics()
    await pool.close()
    assert (stats.opened, stats.reused) == (2, 2)  # one session per account, each used twice
    assert [m.login for m in smarthost.received] == [ALICE, BOB, ALICE, BOB]


def test_the_secret_is_not_in_a_logins_repr() -> None:
    assert "alice-secret" not in repr(login(ALICE, "plain"))

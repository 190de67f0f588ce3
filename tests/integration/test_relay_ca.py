"""A CA file to trust per account pool: a smarthost (and a token endpoint) whose
certificate the test CA signed is verified through the pool's `ca_file` (else
`[tls] ca_file`) alone, with no SSL_CERT_FILE and no context given by the test."""

from __future__ import annotations

import argparse
import asyncio
import random
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest

from mtad import config, db
from mtad.base import vault
from mtad.base.vault import Secret
from mtad.cli import accounts as accounts_cli
from mtad.cli import common
from mtad.deliver import delivery
from mtad.mailboxes import accounts, relay
from mtad.outbound import outcomes, routing, sessions
from mtad.submission import tls_context
from tests.certs import self_signed
from tests.integration.delivering import PROVIDERS, RULES, accept, deliveries
from tests.integration.mailboxes import SEALER, add, relayed
from tests.integration.tokens import TokenServer
from tests.sink import Sink
from tests.zones import ZoneResolver


@pytest.fixture(autouse=True)
def no_ssl_cert_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system's trust store only: what the test CA gets, it gets through ca_file."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.fixture
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that did not sign the smarthost's certificate."""
    return self_signed(tmp_path_factory.mktemp("other-ca"))[0]


def relaying(database: db.Database, settings: relay.Settings) -> delivery.Delivery:
    """The engine of test_relay_delivery.relaying, but its session pool trusts the system's
    store only: a login brings its pool's context."""
    pool = sessions.Pool(sessions.Settings(ehlo_hostname="mtad.test"))
    mailboxes = relay.Mailboxes(database, settings, SEALER, rng=random.Random(0))  # as the daemon builds it
    router = routing.Router(ZoneResolver(""), PROVIDERS)  # relayed mail asks no DNS
    engine = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0), poll_interval=5.0)
    return delivery.Delivery(engine, database, router, pool, RULES, mailboxes=mailboxes)


@pytest.mark.parametrize("where", ["pool", "tls"])
async def test_a_smarthost_signed_by_the_ca_file_takes_the_relayed_mail(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], where: str
) -> None:
    ca = tls_files[0]  # self-signed: the certificate is its own CA
    if where == "pool":
        settings = relay.Settings(pools={"p": relay.PoolSettings(ca_file=ca)}, poll=0.2)
    else:  # [tls] ca_file, for a pool that names none
        settings = relay.Settings(pools={"p": relay.PoolSettings()}, poll=0.2, ca_file=ca)
    await add(database, smarthost, "a")
    await accept(database, relayed("r@example.net"))
    await relaying(database, settings).run_until_idle()
    [message] = smarthost.received
    assert (message.login, message.tls, message.recipients) == ("a@example.com", True, ["r@example.net"])
    assert (await deliveries(database))["r@example.net"]["state"] == "delivered"


async def test_a_smarthost_the_pools_ca_did_not_sign_gets_no_login(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], other_ca: Path
) -> None:
    # [tls] ca_file would verify the smarthost; the pool's own ca_file is the one used.
    settings = relay.Settings(pools={"p": relay.PoolSettings(ca_file=other_ca)}, poll=0.2, ca_file=tls_files[0])
    await add(database, smarthost, "a")
    await accept(database, relayed("r@example.net"))
    await relaying(database, settings).run_until_idle()
    assert smarthost.received == []
    row = (await deliveries(database))["r@example.net"]
    assert (row["state"], row["reason"]) == ("deferred", "tls_failed")


async def test_a_ca_file_that_no_longer_loads_defers_the_mail_and_spares_the_account(
    database: db.Database, smarthost: Sink, tmp_path: Path
) -> None:
    gone = tmp_path / "removed-since-the-config-was-loaded.pem"
    settings = relay.Settings(pools={"p": relay.PoolSettings(ca_file=gone)}, poll=0.2)
    await add(database, smarthost, "a")
    await accept(database, relayed("r@example.net"))
    await relaying(database, settings).run_until_idle()
    row = (await deliveries(database))["r@example.net"]
    assert (row["state"], row["reason"]) == ("deferred", "internal")  # mtad's own failure
    assert (await accounts.get(database, "a")).state is accounts.State.ACTIVE
    assert smarthost.received == []


@dataclass
class HttpsTokenServer(TokenServer):
    """The token endpoint over TLS, with the smarthost's certificate (for "localhost")."""

    tls: ssl.SSLContext | None = None

    async def start(self) -> HttpsTokenServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}/token"


async def test_the_token_endpoint_is_verified_with_the_pools_ca_file_too(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    endpoint = await HttpsTokenServer(tls=tls_context(*tls_files)).start()
    try:
        await add(database, smarthost, "a", secret="good", mechanism=accounts.Mechanism.XOAUTH2)
        await accounts.set_oauth(database, "a", endpoint.url, "mtad-client", SEALER.seal(Secret("cs")), None)
        assert smarthost.logins is not None
        smarthost.logins["a@example.com"] = "access-1"
        await accept(database, relayed("r@example.net"))
        settings = relay.Settings(pools={"p": relay.PoolSettings(ca_file=tls_files[0])}, poll=0.2)
        await relaying(database, settings).run_until_idle()
    finally:
        await endpoint.stop()
    assert [r["refresh_token"] for r in endpoint.requests] == ["good"]
    assert [m.login for m in smarthost.received] == ["a@example.com"]


@pytest.fixture
def key_file(tmp_path: Path) -> tuple[Path, vault.Vault]:
    """An [accounts] key_file, and the vault its key opens."""
    key = vault.Vault.new_key()
    path = tmp_path / "accounts.key"
    path.write_bytes(key)
    return path, vault.Vault(key)


async def test_accounts_test_logs_in_with_the_pools_ca_file(
    dsn: str, database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], other_ca: Path,
    key_file: tuple[Path, vault.Vault], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    await add(database, smarthost, "a")
    await accounts.set_secret(database, "a", key_file[1].seal(Secret("pw-a")))  # sealed with the file's key

    async def accounts_test(ca: Path) -> int:
        path = tmp_path / "mtad.toml"
        path.write_text(f'[database]\ndsn = "{dsn}"\n[accounts]\nkey_file = "{key_file[0]}"\n'
                        f'[account_pools.p]\nca_file = "{ca}"\n')  # fmt: skip
        return await accounts_cli.test(argparse.Namespace(name="a"), config.load(path, environ={}))

    assert await accounts_test(tls_files[0]) == common.EXIT_OK
    assert f"account a: logged in to localhost:{smarthost.port} over TLS" in capsys.readouterr().out
    assert await accounts_test(other_ca) == common.EXIT_FAILED
    assert f"account a: localhost:{smarthost.port} refused: tls_failed" in capsys.readouterr().out
    assert smarthost.received == []

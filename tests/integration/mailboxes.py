"""Sending mailboxes for the integration tests: accounts (at a smarthost sink, or
nowhere), relayed messages and an engine that relays them, the reservations, a
clock that stands still."""

from __future__ import annotations

import dataclasses
import random
import ssl
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mtad import db
from mtad.base import vault
from mtad.base.vault import Secret
from mtad.deliver import delivery, egress
from mtad.mailboxes import accounts, relay
from mtad.outbound import outcomes, routing, sessions
from mtad.signing import dkim
from mtad.spool import commit
from tests.integration.delivering import PROVIDERS, RULES, new_message
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

SEALER = vault.Vault(vault.Vault.new_key())


async def add(
    database: db.Database, sink: Sink, name: str, *, pool: str = "p", secret: str | None = None,
    mechanism: accounts.Mechanism = accounts.Mechanism.PLAIN, **limits: Any,
) -> accounts.Account:  # fmt: skip
    """An account at the sink ("localhost", the certificate's name), its password known to the sink."""
    address = f"{name}@example.com"
    assert sink.logins is not None
    sink.logins[address] = f"pw-{name}"
    account = accounts.Account(name=name, address=address, pool=pool, host="localhost", port=sink.port,
                               login=address, mechanism=mechanism, limits=accounts.Limits(**limits))  # fmt: skip
    stored = await accounts.add(database, account)
    await accounts.set_secret(database, name, SEALER.seal(Secret(secret or f"pw-{name}")))
    return stored


def relaying(
    database: db.Database, tls_files: tuple[Path, Path], *, now: Callable[[], datetime] | None = None,
    settings: relay.Settings | None = None, token_tls: Any = None, routes: dict[str, str] | None = None,
    lease_duration: float = 300.0, signer: dkim.Signer | None = None, poll_interval: float = 5.0,
    max_held: int = 20_000, pools: egress.Egress | None = None, default_pool: str | None = None,
) -> delivery.Delivery:  # fmt: skip
    clock = now or (lambda: datetime.now(UTC))
    pool = sessions.Pool(sessions.Settings(ehlo_hostname="mtad.test"), relay_tls=trusting(tls_files[0]))
    mailboxes = relay.Mailboxes(database, settings or relay.Settings(poll=0.2), SEALER, now=now,
                                rng=random.Random(0), token_tls=token_tls)  # fmt: skip
    router = routing.Router(ZoneResolver(""), PROVIDERS)  # relayed mail asks no DNS
    engine = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0),
                               route_account_pools=routes or {}, lease_duration=lease_duration,
                               poll_interval=poll_interval, max_held=max_held, default_pool=default_pool)  # fmt: skip
    return delivery.Delivery(engine, database, router, pool, RULES, mailboxes=mailboxes, now=clock, signer=signer,
                             pools=pools)  # fmt: skip


def relayed(*recipients: str, pool: str = "p", body: bytes = b"Subject: t\r\n\r\nhello\r\n") -> commit.NewMessage:
    return dataclasses.replace(new_message(*recipients, body=body), account_pool=pool)


async def reservations(database: db.Database, name: str) -> list[str]:
    rows = await query(
        database,
        "SELECT r.state::text AS state FROM account_reservations r JOIN accounts a ON a.id = r.account "
        "WHERE a.name = $1 ORDER BY r.id",
        name,
    )
    return [r["state"] for r in rows]


def frozen() -> datetime:
    """A clock that stands still, just after the messages of the test were accepted."""
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)


def trusting(cert: Path) -> ssl.SSLContext:
    """A client context that trusts the test's self-signed smarthost certificate."""
    return ssl.create_default_context(cafile=str(cert))


async def make(database: db.Database, name: str, pool: str = "p", time_zone: str = "UTC", **limits: Any) -> int:
    account = accounts.Account(
        name=name,
        address=f"{name}@example.com",
        pool=pool,
        host="smtp.example.com",
        port=587,
        login=f"{name}@example.com",
        limits=accounts.Limits(**limits),
        time_zone=time_zone,
    )
    return (await accounts.add(database, account)).id
